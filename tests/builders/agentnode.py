"""The GPU node of the agent's tests: its name and capacity on the fake API server, and a node
state for the publisher that a test changes and whose reads it counts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent.availability import PodGrant
from agent.kube.publisher import NodeState
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
