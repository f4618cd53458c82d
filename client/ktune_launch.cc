// The C ABI over ktune::Launcher: statuses become their absl code and a
// thread-local message; no exception leaves a call.
#include "client/ktune_launch.h"

#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/internal/launch_abi.h"
#include "client/launch.h"

struct ktune_launcher {
  std::unique_ptr<ktune::Launcher> impl;
};

namespace {

thread_local std::string t_last_error;

int Fail(const absl::Status& s) {
  t_last_error = std::string(s.message());
  return static_cast<int>(s.code());
}

int Fail(absl::StatusCode code, absl::string_view message) { return Fail(absl::Status(code, message)); }

// Runs `body` (returning an absl::Status) as one C call.
template <typename Body>
int Call(const char* name, Body body) {
  try {
    const absl::Status s = body();
    return s.ok() ? 0 : Fail(s);
  } catch (const std::exception& e) {
    return Fail(absl::StatusCode::kInternal, absl::StrCat(name, ": ", e.what()));
  } catch (...) {
    return Fail(absl::StatusCode::kInternal, absl::StrCat(name, ": unknown exception"));
  }
}

// The C handle of a recipe is the LoadedRecipe itself.
ktune_recipe* ToHandle(const ktune::LoadedRecipe* r) {
  return reinterpret_cast<ktune_recipe*>(const_cast<ktune::LoadedRecipe*>(r));
}
const ktune::LoadedRecipe* FromHandle(const ktune_recipe* r) { return reinterpret_cast<const ktune::LoadedRecipe*>(r); }

}  // namespace

namespace ktune::internal {

ktune_launcher* WrapLauncher(std::unique_ptr<Launcher> launcher) { return new ktune_launcher{std::move(launcher)}; }

}  // namespace ktune::internal

extern "C" {

int ktune_launch_abi_version(void) { return KTUNE_LAUNCH_ABI_VERSION; }

const char* ktune_last_error(void) { return t_last_error.c_str(); }

int ktune_launcher_create(int device_ordinal, ktune_launcher** out) {
  return Call("ktune_launcher_create", [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("ktune_launcher_create: out is NULL");
    *out = nullptr;
    absl::StatusOr<std::unique_ptr<ktune::Launcher>> launcher = ktune::Launcher::Create(device_ordinal);
    if (!launcher.ok()) return launcher.status();
    *out = ktune::internal::WrapLauncher(*std::move(launcher));
    return absl::OkStatus();
  });
}

void ktune_launcher_destroy(ktune_launcher* launcher) {
  try {
    delete launcher;
  } catch (...) {
    // Nothing to report to: the handle is gone either way.
  }
}

int ktune_recipe_load(ktune_launcher* launcher, const void* bytes, size_t size, ktune_recipe** out) {
  return Call("ktune_recipe_load", [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("ktune_recipe_load: out is NULL");
    *out = nullptr;
    if (launcher == nullptr) return absl::InvalidArgumentError("ktune_recipe_load: launcher is NULL");
    if (bytes == nullptr && size > 0) return absl::InvalidArgumentError("ktune_recipe_load: bytes is NULL");
    absl::StatusOr<const ktune::LoadedRecipe*> r =
        launcher->impl->LoadSerialized(absl::string_view(static_cast<const char*>(bytes), size));
    if (!r.ok()) return r.status();
    *out = ToHandle(*r);
    return absl::OkStatus();
  });
}

int ktune_recipe_launch(ktune_recipe* recipe, const uint64_t* addresses, size_t n, void* stream) {
  return Call("ktune_recipe_launch", [&]() -> absl::Status {
    if (recipe == nullptr) return absl::InvalidArgumentError("ktune_recipe_launch: recipe is NULL");
    if (addresses == nullptr && n > 0) return absl::InvalidArgumentError("ktune_recipe_launch: addresses is NULL");
    const ktune::LoadedRecipe* r = FromHandle(recipe);
    return r->launcher()->Launch(*r, absl::MakeConstSpan(addresses, n), stream);
  });
}

}  // extern "C"
