#include "tuner/core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

std::string Prefix(const std::string& path, const InputFileKind& kind) {
  return absl::StrCat(path, ": cannot read the ", kind.what, ": ");
}

absl::Status ErrnoError(const std::string& path, const InputFileKind& kind, const char* what, int err) {
  const std::string message = absl::StrCat(Prefix(path, kind), what, " failed: ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat(Prefix(path, kind), "no such file"));
  }
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InvalidArgumentError(message);
}

// Everything but a regular file is refused, by name.
absl::Status CheckRegular(const struct stat& st, const std::string& path, const InputFileKind& kind) {
  if (S_ISREG(st.st_mode)) {
    if (static_cast<uint64_t>(st.st_size) > kind.max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(path, kind), "it has ", st.st_size,
                                                     " bytes, more than the ", kind.max_bytes, " a ", kind.what,
                                                     " may have"));
    }
    return absl::OkStatus();
  }
  const char* type = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a file";
  return absl::InvalidArgumentError(absl::StrCat(Prefix(path, kind), "it is ", type, ", not a regular file"));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> ReadInputFile(const std::string& path, const InputFileKind& kind) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoError(path, kind, "stat", errno);
  if (absl::Status s = CheckRegular(st, path, kind); !s.ok()) return s;
  Fd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(path, kind, "open", errno);
  if (fstat(fd.get(), &st) != 0) return ErrnoError(path, kind, "stat", errno);
  if (absl::Status s = CheckRegular(st, path, kind); !s.ok()) return s;

  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t filled = 0;
  for (;;) {
    // One byte beyond the cap tells a file that grew past it from one that is full.
    if (filled == data.size()) {
      if (data.size() > kind.max_bytes) break;
      data.resize(std::min<uint64_t>(kind.max_bytes + 1, std::max<size_t>(2 * data.size(), 4096)));
    }
    const ssize_t n = read(fd.get(), data.data() + filled, data.size() - filled);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(path, kind, "read", errno);
    }
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  if (filled > kind.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(path, kind), "it grew past the ", kind.max_bytes, " bytes a ", kind.what, " may have"));
  }
  data.resize(filled);
  return data;
}

}  // namespace ktune
