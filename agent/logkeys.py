"""Structured logging keys, defined once (pass them in `extra=`)."""

GPU_UUID = "gpu_uuid"
POD = "pod"
NODE = "node"
RESOURCE = "resource"

ALL = (GPU_UUID, POD, NODE, RESOURCE)
