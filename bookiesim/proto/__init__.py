"""BookKeeper v3 and Pulsar protobuf definitions; ``*_pb2`` modules are generated."""
