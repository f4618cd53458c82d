#include "tuner/paths.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : fallback;
}

}  // namespace

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
