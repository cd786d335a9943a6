"""The GPU node of the agent's tests: its name and capacity on the fake API server, a node state
for the publisher that a test changes and whose reads it counts, what its NRT says is free, and
the socket file a kubelet leaves on disk."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.availability import PodGrant
from agent.kube.publisher import NodeState
from agent.nrt.wire import ATTR_GPUS_FREE
from tests.builders.topology import allocatable_of, dgx_h100

NODE = "gpu-node-1"
NODE_CAPACITY = {"cpu": "224", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}


class NodeStateSource:
    """The publisher's `source`: a DGX H100 with nothing allocated until `allocate(...)`.

    Set `state = None` to make the node state unreadable; `reads` counts the calls.
    """

    def __init__(self) -> None:
        inventory = dgx_h100()
        self.state: NodeState | None = NodeState(
            inventory=inventory, snapshot=allocatable_of(inventory)
        )
        self.reads = 0

    def __call__(self) -> NodeState | None:
        self.reads += 1
        return self.state

    def allocate(self, *pods: PodGrant) -> None:
        """The kubelet now reports exactly `pods` as holding devices."""
        assert self.state is not None
        snapshot = self.state.snapshot
        assert snapshot is not None
        self.state = replace(self.state, snapshot=replace(snapshot, pods=tuple(pods)))


def gpu_available(obj: dict[str, Any], zone: str = "node-0") -> str:
    """`available` of `nvidia.com/gpu` in one zone of a NodeResourceTopology object."""
    found = next(z for z in obj["zones"] if z["name"] == zone)
    available: str = next(
        r["available"] for r in found["resources"] if r["name"] == "nvidia.com/gpu"
    )
    return available


def gpu_figures(obj: dict[str, Any]) -> tuple[int, int]:
    """(`gputopo.io/gpusFree`, the sum of `nvidia.com/gpu` available over the NUMA zones)."""
    free = next(a["value"] for a in obj["attributes"] if a["name"] == ATTR_GPUS_FREE)
    zones = sum(
        int(r["available"])
        for z in obj["zones"]
        if z["type"] == "Node"
        for r in z.get("resources", [])
        if r["name"] == "nvidia.com/gpu"
    )
    return int(free), zones


def serve_socket(path: Path) -> Path:
    """A unix socket file at `path` (what a kubelet serving there leaves on disk), made anew."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path
