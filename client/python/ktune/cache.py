"""A process-local answer cache over a Client.

After the first call for a (problem key, policy), `get` is one dict lookup:
no RPC, no proto work (bench/python_cache_bench.py measures it). Answers are
kept for the life of the cache: a heuristic answer is not upgraded when the
daemon's background tune finishes; `clear()` (or a new cache) asks again.

Thread-safety: lookups are lock-free (dict reads under the GIL); a miss takes
a lock so concurrent misses of one key make one RPC.
"""
import threading

from .problems import problem_from_key
from .v1 import ktune_pb2 as pb


class AnswerCache:
    def __init__(self, client, include_cubin=True, nearest_on_miss=False):
        self.client = client
        self.include_cubin = include_cubin
        self.nearest_on_miss = nearest_on_miss
        self._answers = {}
        self._lock = threading.Lock()

    def get(self, key, policy=pb.HEURISTIC_ON_MISS):
        """The pb.GetConfigResponse for a norm_key/gemm_key tuple; raises ktune.Error as the client does."""
        answer = self._answers.get((key, policy))
        if answer is not None:
            return answer
        return self._miss(key, policy)

    def _miss(self, key, policy):
        with self._lock:
            answer = self._answers.get((key, policy))
            if answer is None:
                answer = self.client.get_config(problem_from_key(key), policy, self.include_cubin,
                                                self.nearest_on_miss)
                self._answers[(key, policy)] = answer
            return answer

    def __len__(self):
        return len(self._answers)

    def clear(self):
        with self._lock:
            self._answers.clear()
