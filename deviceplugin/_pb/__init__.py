"""Generated protobuf and gRPC code (proto/generate.sh); do not edit."""
