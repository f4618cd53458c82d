#include "daemon/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace ktune {

absl::Status SdNotify(std::string_view state) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr || env[0] == '\0') return absl::OkStatus();
  const std::string path = env;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if ((path[0] != '/' && path[0] != '@') || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("NOTIFY_SOCKET: unusable socket name \"", path, "\""));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("sd_notify: socket: ", std::strerror(errno)));
  const ssize_t sent =
      sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr), len);
  const int err = errno;
  close(fd);
  if (sent < 0) {
    return absl::UnavailableError(absl::StrCat("sd_notify to ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace ktune
