"""Errors raised by the agent package.

AgentError
├── ConfigError          bad flags, environment or config file (every problem in one message)
├── FixtureError         a malformed NVML fixture (file, key path, reason)
├── NvmlError(code)      an NVML call failed; `code` is NVML's return value
│   ├── NvmlUnavailable  no driver / library on this machine
│   ├── NvmlNotSupported the call is not supported on this device (usually turned into absence)
│   └── GpuLost          the GPU fell off the bus or needs a reset
├── PublishError         writing to the Kubernetes API failed
│   └── NodeNotFound     the Node to publish for does not exist (nothing is written for it)
└── TopologyDecodeError  a NodeResourceTopology object that gputopo cannot read (node, field)
"""

from __future__ import annotations


class AgentError(Exception):
    """Root of the agent's errors."""


class ConfigError(AgentError):
    """Bad configuration; the message lists every problem found."""


class FixtureError(AgentError):
    """A malformed NVML fixture; the message names the file, the key path and the reason."""


class NvmlError(AgentError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class NvmlUnavailable(NvmlError):  # noqa: N818 (the names house-style.md gives)
    """NVML cannot be loaded or initialised (no driver on this machine)."""


class NvmlNotSupported(NvmlError):  # noqa: N818
    """The device does not support the call."""


class GpuLost(NvmlError):  # noqa: N818
    """The GPU is lost or needs a reset."""


class PublishError(AgentError):
    """Writing the NodeResourceTopology or node labels failed."""


class NodeNotFound(PublishError):  # noqa: N818 (what the caller waits for, not a failure)
    """The Node the agent publishes for does not exist: no object is written until it does."""


class TopologyDecodeError(AgentError):
    """A bad or foreign NodeResourceTopology object; names the node and the field."""

    def __init__(self, node: str, field: str, reason: str) -> None:
        super().__init__(f"NodeResourceTopology {node or '(unnamed)'}: {field}: {reason}")
        self.node = node
        self.field = field
        self.reason = reason
