"""ktune from Python: the daemon's client, a process-local answer cache, and the launcher.

    import ktune
    client = ktune.Client()                      # KTUNE_ADDRESS or the default socket
    answers = ktune.AnswerCache(client)
    answer = answers.get(ktune.norm_key("rmsnorm", "fwd", 8192, 4096, "bf16"))
    recipe = ktune.Launcher(0).load(answer.recipe)   # needs a GPU and libktune_launch.so

ktune.torch holds the torch ops (rms_norm, layer_norm, linear) and patch(model).
"""
from .cache import AnswerCache
from .client import Client, default_address
from .errors import (Error, FailedPrecondition, Internal, InvalidProblem, LauncherUnavailable, NoDriver, NotFound,
                     PermissionDenied, ResourceExhausted, Unavailable)
from .launch import Launcher, load_library
from .problems import gemm_key, gemm_problem, norm_key, norm_problem, problem_from_key
from .v1 import ktune_pb2 as pb

__version__ = "0.1.0"
__all__ = ["AnswerCache", "Client", "default_address", "Error", "FailedPrecondition", "Internal", "InvalidProblem",
           "LauncherUnavailable", "NoDriver", "NotFound", "PermissionDenied", "ResourceExhausted", "Unavailable",
           "Launcher", "load_library", "gemm_key", "gemm_problem", "norm_key", "norm_problem", "problem_from_key",
           "pb"]
