"""The gRPC client of ktuned: one channel, typed calls, errors as ktune.Error.

Thread-safe: a Client may be shared by threads (gRPC channels and stubs are).
`rpc_count` counts the calls made, so a test can prove a cache made none.
"""
import os

import grpc

from . import errors
from .v1 import ktune_pb2 as pb
from .v1 import ktune_pb2_grpc as pb_grpc

_MAX_MESSAGE = 256 << 20  # answers with cubins, bundles: as the C++ client


def default_address():
    """KTUNE_ADDRESS, else the daemon's default Unix socket (tuner/core/paths.cc)."""
    address = os.environ.get("KTUNE_ADDRESS")
    if address:
        return address
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = os.path.join(runtime, "ktune") if runtime else f"/tmp/ktune-{os.getuid()}"
    return f"unix:{folder}/ktuned.sock"


class Client:
    """Calls on one ktuned.

    address: "unix:/path" or "host:port" (TCP needs TLS: tls_ca_pem, bytes);
    token: the bearer token (default env KTUNE_TOKEN); timeout_s: per call.
    """

    def __init__(self, address=None, token=None, timeout_s=30.0, tls_ca_pem=None, tls_server_name=None):
        self.address = address or default_address()
        self.timeout_s = timeout_s
        token = token if token is not None else os.environ.get("KTUNE_TOKEN")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        options = [("grpc.max_receive_message_length", _MAX_MESSAGE),
                   ("grpc.max_send_message_length", _MAX_MESSAGE),
                   ("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
        if tls_ca_pem and not self.address.startswith("unix:"):
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(self.address, grpc.ssl_channel_credentials(tls_ca_pem), options)
        else:
            self._channel = grpc.insecure_channel(self.address, options)
        self._stub = pb_grpc.KtuneServiceStub(self._channel)
        self.rpc_count = 0

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout_s=None):
        self.rpc_count += 1
        try:
            return method(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, self.address) from None

    def get_config(self, problem, policy=pb.HEURISTIC_ON_MISS, include_cubin=False, nearest_on_miss=False,
                   timeout_s=None):
        """GetConfig: the answer (config, source, recipe) for a pb.Problem, by policy."""
        request = pb.GetConfigRequest(problem=problem, policy=policy, include_cubin=include_cubin,
                                      nearest_on_miss=nearest_on_miss)
        return self._call(self._stub.GetConfig, request, timeout_s)

    def status(self, timeout_s=None):
        return self._call(self._stub.GetStatus, pb.GetStatusRequest(), timeout_s)

    def tune(self, problem, repetitions=0, force=False, timeout_s=None):
        """Tune: yields pb.TuneEvent (progress, candidates, then the result)."""
        request = pb.TuneRequest(problem=problem, options=pb.TuneOptions(repetitions=repetitions, force=force))
        self.rpc_count += 1
        try:
            for event in self._stub.Tune(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata):
                yield event
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, self.address) from None

    def list_entries(self, op="", stale_only=False, page_size=0):
        """ListEntries, every page: yields pb.Entry."""
        token = ""
        while True:
            page = self._call(self._stub.ListEntries, pb.ListEntriesRequest(
                op=op, stale_only=stale_only, page_size=page_size, page_token=token))
            yield from page.entries
            token = page.next_page_token
            if not token:
                return
