// A consumer of the installed launcher, through both of its APIs.
// C: on a machine without a CUDA driver, creating a launcher must fail with 9
// (failed precondition) and say why; with one, it must succeed.
// C++: the installed headers (client/launch.h and the generated ktune.pb.h)
// compile and link, and a recipe without a cubin is refused naming the field.
// Exits 0 when the library behaves as its headers say.
#include <cstdio>
#include <cstring>
#include <string>

#include "client/ktune_launch.h"
#include "client/launch.h"
#include "client/launch_validation.h"

int main() {
  if (ktune_launch_abi_version() != KTUNE_LAUNCH_ABI_VERSION) {
    std::printf("ABI version %d, header %d\n", ktune_launch_abi_version(), KTUNE_LAUNCH_ABI_VERSION);
    return 1;
  }
  ktune_launcher* launcher = nullptr;
  const int rc = ktune_launcher_create(0, &launcher);
  if (rc == 0) {
    std::printf("launcher created on GPU 0\n");
    ktune_launcher_destroy(launcher);
  } else {
    std::printf("ktune_launcher_create: %d: %s\n", rc, ktune_last_error());
    if (rc != 9 || launcher != nullptr || std::strlen(ktune_last_error()) == 0) return 1;
  }

  ktune::v1::LaunchRecipe recipe;
  recipe.set_template_id("norm/rmsnorm_fwd");
  const absl::Status s = ktune::ValidateLaunchRecipe(recipe);
  std::printf("ValidateLaunchRecipe: %s\n", s.ToString().c_str());
  return s.code() == absl::StatusCode::kInvalidArgument && std::string(s.message()).find("cubin") == 0 ? 0 : 1;
}
