"""ktune.v1: the wire API's generated stubs (ktune_pb2, ktune_pb2_grpc), written here at build time."""
