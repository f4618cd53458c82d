/* The launcher's C ABI (libktune_launch.so): ktune recipes launched from any
   language, over ktune::Launcher (client/launch.h). Stable: a change that
   breaks a caller bumps KTUNE_LAUNCH_ABI_VERSION.

   Thread-safe: every call may come from any thread; errors are reported per
   thread. No call throws or aborts on bad input. */
#ifndef KTUNE_CLIENT_KTUNE_LAUNCH_H_
#define KTUNE_CLIENT_KTUNE_LAUNCH_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KTUNE_LAUNCH_ABI_VERSION 1

typedef struct ktune_launcher ktune_launcher; /* one per GPU ordinal; thread-safe */
typedef struct ktune_recipe ktune_recipe;     /* a loaded recipe; owned by its launcher */

/* Every call returns 0 on success, else a nonzero absl-like code (3 invalid argument,
   9 failed precondition, 5 not found, 13 internal, ...) and sets a thread-local message. */
int ktune_launch_abi_version(void);
/* This thread's last error message, "" if none. Valid until this thread's next call. */
const char* ktune_last_error(void);

/* Loads libcuda.so.1 at run time; 9 without a driver. */
int ktune_launcher_create(int device_ordinal, ktune_launcher** out);
/* Frees the launcher, its recipes and their workspaces. NULL is ignored.
   REQUIRES: none of its launches still runs. */
void ktune_launcher_destroy(ktune_launcher* launcher);

/* bytes: a serialized ktune.v1.LaunchRecipe carrying its cubin (and args/tensors). Modules are loaded once
   and cached per recipe (same bytes -> same handle). */
int ktune_recipe_load(ktune_launcher* launcher, const void* bytes, size_t size, ktune_recipe** out);

/* addresses[i] is the device address bound to recipe.tensors[i] (n must equal tensors_size);
   0 for an optional tensor left unbound. The ROLE_WORKSPACE entry: 0 for the launcher's own
   workspace (one per stream, zeroed once when workspace_zeroed), or the caller's own of at least
   workspace_bytes (zeroed by the caller when workspace_zeroed; what a CUDA graph capture needs). stream: a CUstream (0
   = legacy default). */
int ktune_recipe_launch(ktune_recipe* recipe, const uint64_t* addresses, size_t n, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KTUNE_CLIENT_KTUNE_LAUNCH_H_ */
