"""The launcher: ctypes over libktune_launch.so's C ABI (client/ktune_launch.h).

The library is found, in order, at env KTUNE_LIBRARY (a path; an error if it
does not load), next to this package (libktune_launch.so copied into it), and
through ctypes.util.find_library("ktune_launch") (the loader's path,
ldconfig). The library loads libcuda.so.1 itself at run time, so importing
this module needs no driver; creating a Launcher without one raises NoDriver.

Thread-safety: a Launcher and its recipes may be used from any thread (the C
ABI's contract); error messages are per thread.
"""
import ctypes
import ctypes.util
import os

from . import errors

ABI_VERSION = 1
LIBRARY_NAME = "libktune_launch.so"

_library = None


def library_candidates():
    """Where load_library looks, in order: (how it was found, path or name)."""
    out = []
    if os.environ.get("KTUNE_LIBRARY"):
        out.append(("KTUNE_LIBRARY", os.environ["KTUNE_LIBRARY"]))
    out.append(("package folder", os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)))
    found = ctypes.util.find_library("ktune_launch")
    if found:
        out.append(("find_library", found))
    return out


def _bind(lib):
    c = ctypes
    lib.ktune_launch_abi_version.restype = c.c_int
    lib.ktune_launch_abi_version.argtypes = []
    lib.ktune_last_error.restype = c.c_char_p
    lib.ktune_last_error.argtypes = []
    lib.ktune_launcher_create.restype = c.c_int
    lib.ktune_launcher_create.argtypes = [c.c_int, c.POINTER(c.c_void_p)]
    lib.ktune_launcher_destroy.restype = None
    lib.ktune_launcher_destroy.argtypes = [c.c_void_p]
    lib.ktune_recipe_load.restype = c.c_int
    lib.ktune_recipe_load.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t, c.POINTER(c.c_void_p)]
    lib.ktune_recipe_launch.restype = c.c_int
    lib.ktune_recipe_launch.argtypes = [c.c_void_p, c.POINTER(c.c_uint64), c.c_size_t, c.c_void_p]
    return lib


def load_library():
    """The loaded C ABI; raises LauncherUnavailable saying where it looked and why each failed."""
    global _library
    if _library is not None:
        return _library
    tried = []
    for how, path in library_candidates():
        if how == "package folder" and not os.path.exists(path):
            tried.append(f"{path} ({how}): absent")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({how}): {e}")
            if how == "KTUNE_LIBRARY":  # named explicitly: never silently take another copy
                break
            continue
        try:
            lib = _bind(lib)
        except AttributeError as e:
            tried.append(f"{path} ({how}): not the ktune launcher ({e})")
            if how == "KTUNE_LIBRARY":  # named explicitly: never silently take another copy
                break
            continue
        version = lib.ktune_launch_abi_version()
        if version != ABI_VERSION:
            tried.append(f"{path} ({how}): C ABI version {version}, this package speaks {ABI_VERSION}")
            if how == "KTUNE_LIBRARY":
                break
            continue
        _library = lib
        return lib
    if not any("find_library" in t for t in tried) and ctypes.util.find_library("ktune_launch") is None:
        tried.append("ctypes.util.find_library('ktune_launch'): not found")
    raise errors.LauncherUnavailable(
        f"cannot load {LIBRARY_NAME}; tried: " + "; ".join(tried) +
        ". Set KTUNE_LIBRARY to the library's path (it is built as client/libktune_launch.so)")


def _check(lib, code, what):
    if code != 0:
        message = (lib.ktune_last_error() or b"").decode("utf-8", "replace")
        if code == errors.FAILED_PRECONDITION and "driver" in message.lower():
            raise errors.NoDriver(f"{what}: {message}", code)
        raise errors.from_code(code, f"{what}: {message}")


class Recipe:
    """A loaded recipe; launch(addresses, stream) runs its kernels (or cuBLASLt call).

    addresses: one device address per entry of recipe.tensors, in order (0 for
    an optional tensor left unbound and for the workspace, which the launcher
    owns). stream: a CUstream as an int (torch: current_stream().cuda_stream).
    """

    __slots__ = ("_launcher", "_handle", "_launch", "n", "_array")

    def __init__(self, launcher, handle, n):
        self._launcher = launcher  # keeps the launcher (which owns the handle) alive
        self._handle = handle
        self._launch = launcher._lib.ktune_recipe_launch
        self.n = n
        self._array = ctypes.c_uint64 * n

    def launch(self, addresses, stream=0):
        code = self._launch(self._handle, self._array(*addresses), self.n, stream)
        if code != 0:
            _check(self._launcher._lib, code, "ktune_recipe_launch")


class Launcher:
    """One per GPU ordinal; loads recipes (each module once: same bytes, same handle)."""

    def __init__(self, device_ordinal=0):
        self._lib = load_library()
        handle = ctypes.c_void_p()
        _check(self._lib, self._lib.ktune_launcher_create(device_ordinal, ctypes.byref(handle)),
               f"ktune_launcher_create({device_ordinal})")
        self._handle = handle
        self.device_ordinal = device_ordinal

    def load(self, recipe):
        """recipe: a ktune.v1 LaunchRecipe (with its cubin) or its serialized bytes."""
        data = recipe if isinstance(recipe, (bytes, bytearray)) else recipe.SerializeToString()
        if not isinstance(recipe, (bytes, bytearray)):
            n = len(recipe.tensors)
        else:
            from .v1 import ktune_pb2 as pb
            n = len(pb.LaunchRecipe.FromString(bytes(data)).tensors)
        buffer = ctypes.create_string_buffer(bytes(data), len(data))
        handle = ctypes.c_void_p()
        _check(self._lib, self._lib.ktune_recipe_load(self._handle, buffer, len(data), ctypes.byref(handle)),
               "ktune_recipe_load")
        return Recipe(self, handle, n)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            self._lib.ktune_launcher_destroy(handle)
            self._handle = None
