"""Claim-style pods in the simulator: their GPUs allocated by the scheduler's claims code.

Every simulated node publishes its whole (non-MIG) GPUs as DRA devices `gpu-<index>` of driver
`gpu.gputopo.io` (a pool named after the node), with the attributes the driver publishes:
`type` "gpu", `productName` (the node's GPU model label), `numaNode` (when known) and
`nvlinkIsland` (GPUs joined by NVLink, directly or through others, share it), and capacity
`memory`; the one DeviceClass is `gpu.gputopo.io` (`type == "gpu"`). A pod with `claims` is
placed by `ClaimAllocator` with the policy's scoring, on the nodes where the rest of it (cpu,
memory, taints, affinity) fits, and bound as a pod of that many whole GPUs on the GPUs its
claims got. A GPU is in use for claims when the node's state has anything on it, so the two
paths never hand out one GPU twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from fractions import Fraction

from agent.docread import DocReader
from scheduler.claims.allocator import ClaimAllocator
from scheduler.claims.decision import ClaimNode, PodClaims
from scheduler.claims.errors import SpecError
from scheduler.claims.model import (
    AllocatedDevice,
    Allocation,
    AllocationMode,
    AttrValue,
    Capacity,
    Device,
    DeviceClass,
    DeviceId,
    ResourceClaim,
)
from scheduler.claims.order import GpuMap
from scheduler.claims.parse import parse_claim
from scheduler.claims.slices import NodeDevices
from scheduler.claims.usage import Usage
from scheduler.placement import GPU_PRODUCT_LABEL, Assignment, NodeState, Placer, PodRequest

__all__ = ["DRIVER", "GPU_CLASS", "SimClaims", "claim_gpus", "claim_node", "read_pod_claims"]

DRIVER = "gpu.gputopo.io"
GPU_CLASS = DeviceClass(
    name="gpu.gputopo.io", selectors=(f'device.attributes["{DRIVER}"].type == "gpu"',)
)


def read_pod_claims(reader: DocReader, raw: object, path: str) -> tuple[ResourceClaim, ...]:
    """A pod's `claims`: each a ResourceClaim's `spec` (`devices.requests`, `constraints`, as in
    a ResourceClaimTemplate), of class gpu.gputopo.io; every way to satisfy a request asks for
    the same number of GPUs (`ExactCount`), so the pod's GPU count is known before it is placed."""
    claims = []
    for i, spec in enumerate(reader.as_list(raw, path)):
        obj = {"metadata": {"name": f"claim-{i}", "namespace": "sim"}, "spec": spec}
        try:
            claim = parse_claim(obj)
        except SpecError as exc:
            reader.fail(f"{path}[{i}]", f"{exc.field}: {str(exc).rsplit(': ', 1)[-1]}")
        for request in claim.spec.requests:
            counts = {a.count for a in request.alternatives}
            modes = {a.mode for a in request.alternatives}
            if len(counts) != 1 or modes != {AllocationMode.EXACT_COUNT}:
                reader.fail(
                    f"{path}[{i}]", f"request {request.name}: one ExactCount for all its ways"
                )
        claims.append(claim)
    return tuple(claims)


def claim_gpus(claims: Sequence[ResourceClaim]) -> int:
    """The whole GPUs `claims` ask for."""
    return sum(r.alternatives[0].count for c in claims for r in c.spec.requests)


def claim_node(node: NodeState) -> ClaimNode:
    """`node`'s whole GPUs as DRA devices (see the module docstring)."""
    islands = _islands(node)
    devices, whole = [], {}
    for g in range(node.gpu_count):
        if node.gpu_mig[g]:
            continue
        dev_id = DeviceId(DRIVER, node.name, f"gpu-{g}")
        attrs: dict[str, AttrValue] = {
            f"{DRIVER}/type": "gpu",
            f"{DRIVER}/nvlinkIsland": islands[g],
        }
        if node.gpu_numa[g] is not None:
            attrs[f"{DRIVER}/numaNode"] = node.gpu_numa[g]  # type: ignore[assignment]
        if GPU_PRODUCT_LABEL in node.labels:
            attrs[f"{DRIVER}/productName"] = node.labels[GPU_PRODUCT_LABEL]
        memory = {f"{DRIVER}/memory": Capacity(value=Fraction(node.gpu_memory[g]))}
        devices.append(Device(id=dev_id, attributes=attrs, capacity=memory))
        whole[dev_id] = g
    found = NodeDevices(node=node.name, devices=tuple(devices))
    gpus = None if node.selector is None else GpuMap(selector=node.selector, whole=whole, parent={})
    return ClaimNode(name=node.name, devices=found, gpus=gpus, state=node)


def _islands(node: NodeState) -> list[int]:
    """Per GPU, the lowest GPU index of its NVLink-connected group."""
    n = node.gpu_count
    island = list(range(n))
    links = node.links
    if links is None:
        return island
    for a in range(n):
        for b in range(a + 1, n):
            if links.link(a, b).nvlinks:
                low, high = sorted((island[a], island[b]))
                island = [low if i == high else i for i in island]
    return island


class SimClaims:
    """Places claim-style pods (`choose`) with the scheduler's claims code."""

    def __init__(self, placer: Placer) -> None:
        self.placer = placer
        self.allocator = ClaimAllocator({GPU_CLASS.name: GPU_CLASS}, scoring=placer.scoring)
        self._nodes: dict[str, ClaimNode] = {}

    def choose(
        self,
        pod: PodRequest,
        claims: Sequence[ResourceClaim],
        excluded: AbstractSet[str] | None = None,
    ) -> Assignment | None:
        """Where `pod` and its claims go (nothing is bound), or None."""
        rest = replace(pod, gpus=0)
        names = [n for n in self.placer.feasible(rest) if not excluded or n not in excluded]
        nodes = [self._node(n) for n in names]
        usage = _usage(nodes)
        decision = self.allocator.place(
            PodClaims(key=pod.key, claims=tuple(claims)), nodes, usage, explain=False
        )
        if decision.node is None or len(decision.gpus) != pod.gpus:
            return None
        return Assignment(node=decision.node, gpus=decision.gpus)

    def _node(self, name: str) -> ClaimNode:
        state = self.placer.snapshot.node(name)
        found = self._nodes.get(name)
        if found is None or found.state is not state:
            found = self._nodes[name] = claim_node(state)
        return found


def _usage(nodes: Sequence[ClaimNode]) -> Usage:
    """The GPUs of `nodes` that have anything on them, as held devices."""
    held = []
    for node in nodes:
        state = node.state
        if state is None or node.gpus is None:
            continue
        for dev_id, g in node.gpus.whole.items():
            if not state.idle_mask >> g & 1:
                held.append(AllocatedDevice(request="placed", id=dev_id))
    return Usage.of([Allocation(devices=tuple(held))])
