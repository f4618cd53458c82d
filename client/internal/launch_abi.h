// The C ABI's handle for a C++ Launcher: how tests put a Launcher over a fake
// driver behind the C functions of client/ktune_launch.h.
#pragma once

#include <memory>

#include "client/ktune_launch.h"
#include "client/launch.h"

namespace ktune::internal {

// A handle owning `launcher`, for ktune_recipe_load and ktune_launcher_destroy.
ktune_launcher* WrapLauncher(std::unique_ptr<Launcher> launcher);

}  // namespace ktune::internal
