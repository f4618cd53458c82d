#include "tuner/core/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ktune {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : fallback;
}

// Judges what lstat found at `dir`.
absl::Status JudgePrivateDir(const std::string& dir, const struct stat& st) {
  auto refuse = [&dir](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("socket directory ", dir, " ", what,
                     ": another user could replace the socket; remove it (ktuned creates it 0700) or fix it"));
  };
  if (S_ISLNK(st.st_mode)) return refuse("is a symlink");
  if (!S_ISDIR(st.st_mode)) return refuse("is not a directory");
  if (st.st_uid != geteuid()) {
    return refuse(absl::StrCat("is owned by uid ", st.st_uid, ", not by us (uid ", geteuid(), ")"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return refuse(absl::StrFormat("is writable by %s (mode %04o)", (st.st_mode & S_IWOTH) != 0 ? "others" : "its group",
                                  st.st_mode & 07777));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EnsurePrivateDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create socket directory ", dir, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("socket directory ", dir, ": ", std::strerror(errno)));
  }
  return JudgePrivateDir(dir, st);
}

absl::Status CheckPrivateDir(const std::string& dir) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return absl::OkStatus();
  return JudgePrivateDir(dir, st);
}

std::string DefaultRuntimeDir() {
  const std::string xdg = EnvOr("XDG_RUNTIME_DIR", "");
  if (!xdg.empty()) return xdg + "/ktune";
  return absl::StrCat("/tmp/ktune-", getuid());
}

std::string DefaultServerAddress() { return "unix:" + DefaultRuntimeDir() + "/ktuned.sock"; }

std::string DefaultDatabasePath() {
  const std::string xdg = EnvOr("XDG_DATA_HOME", "");
  if (!xdg.empty()) return xdg + "/ktune/cache.db";
  return EnvOr("HOME", absl::StrCat("/tmp/ktune-", getuid())) + "/.local/share/ktune/cache.db";
}

}  // namespace ktune
