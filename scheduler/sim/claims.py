"""Claim-style pods in the simulator: their GPUs allocated by the scheduler's claims code.

Every simulated node publishes its whole (non-MIG) GPUs as DRA devices `gpu-<index>` of driver
`gpu.gputopo.io` (a pool named after the node), with the attributes the driver publishes:
`type` "gpu", `productName` (the node's GPU model label), `numaNode` (when known) and
`nvlinkIsland` (GPUs joined by NVLink, directly or through others, share it), and capacity
`memory`; the one DeviceClass is `gpu.gputopo.io` (`type == "gpu"`). A pod with `claims` is
placed by `ClaimAllocator` with the policy's scoring (given the placer's `Snapshot` as the nodes'
change log, as the scheduler gives its own), on the nodes where the rest of it (cpu, memory,
taints, affinity) fits, and bound as a pod of that many whole GPUs on the GPUs its
claims got. A GPU is in use for claims when the node's state has anything on it, so the two
paths never hand out one GPU twice.

A gang of claim-style pods (`place_gang`) gets its claims from `ClaimAllocator.place_gang`: all
members' claims or none (each member's claims are its own, named after it), in one domain of
the job's topology label when it has one (preferred: else anywhere; `prefer_clique`: one clique
preferred, as for other gangs), on the nodes where a member's rest fits. The rests are then
checked together (cpu, memory of members sharing a node): a gang whose rests do not fit where
its claims went is not placed.

In the victim search a claim-style unit asks its claims apart from its pods' requests, as in
the scheduler (`scheduler.preemption.DeviceFit`, `GangDeviceFit`): `SimClaims.fit` and
`SimClaims.gang_fit` judge them by the claims code on clones of the nodes without the pods
gone, so the search evicts only where the claims' selectors and constraints are met (an H100
claim does not evict on an A100 node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from fractions import Fraction

from agent.docread import DocReader
from scheduler.claims.allocator import ClaimAllocator
from scheduler.claims.decision import ClaimNode, GangDecision, PodClaims
from scheduler.claims.errors import SpecError
from scheduler.claims.model import (
    AllocatedDevice,
    Allocation,
    AllocationMode,
    AttrValue,
    Capacity,
    ClaimKey,
    Device,
    DeviceClass,
    DeviceId,
    ResourceClaim,
)
from scheduler.claims.order import GpuMap
from scheduler.claims.parse import parse_claim
from scheduler.claims.slices import NodeDevices
from scheduler.claims.usage import Usage
from scheduler.placement import (
    CLIQUE_LABEL,
    GPU_PRODUCT_LABEL,
    Assignment,
    GangPlacement,
    NodeState,
    Placer,
    PodRequest,
    Snapshot,
    TopologyConstraint,
    topology_domains,
)

__all__ = [
    "DRIVER",
    "GPU_CLASS",
    "ClaimFit",
    "SimClaims",
    "claim_gpus",
    "claim_node",
    "read_pod_claims",
]

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
        self._lists: dict[tuple[str, ...], tuple[int, tuple[ClaimNode, ...]]] = {}
        self._given: dict[int, tuple[tuple[str, ...], int, tuple[ClaimNode, ...]]] = {}
        """By the id of a tuple of names given (held, so the id stays its own): its nodes."""
        self._usage = Usage()  # kept in step with the snapshot (`_in_use`)
        self._held: dict[str, frozenset[DeviceId]] = {}
        self._followed: tuple[Snapshot, int] | None = None  # `_usage` brought up to these

    def choose(
        self,
        pod: PodRequest,
        claims: Sequence[ResourceClaim],
        excluded: AbstractSet[str] | None = None,
    ) -> Assignment | None:
        """Where `pod` and its claims go (nothing is bound), or None."""
        rest = replace(pod, gpus=0)
        names = _outside(self.placer.feasible(rest), excluded)
        nodes = self._listed(names)
        usage = self._in_use()
        decision = self.allocator.place(
            PodClaims(key=pod.key, claims=tuple(claims)),
            nodes,
            usage,
            explain=False,
            changes=self.placer.snapshot,
        )
        if decision.node is None or len(decision.gpus) != pod.gpus:
            return None
        return Assignment(node=decision.node, gpus=decision.gpus)

    def place_gang(
        self,
        pods: Sequence[tuple[PodRequest, Sequence[ResourceClaim]]],
        *,
        topology: TopologyConstraint | None = None,
        prefer_clique: bool = False,
        excluded: AbstractSet[str] | None = None,
    ) -> GangPlacement:
        """Where every member and its claims go, or none (nothing is bound; see the module
        docstring)."""
        if not pods:
            return GangPlacement(ok=True)
        rest = replace(pods[0][0], gpus=0)
        names = _outside(self.placer.feasible(rest), excluded)
        nodes = self._listed(names)
        members = [PodClaims(key=p.key, claims=_own(p.key, c)) for p, c in pods]
        usage = self._in_use()
        if topology is None and prefer_clique and self.placer.snapshot.domains(CLIQUE_LABEL):
            topology = TopologyConstraint(label=CLIQUE_LABEL, required=False)
        decision, snapshot = None, self.placer.snapshot
        if topology is not None:
            domains = _domains(topology_domains(snapshot, topology.label), nodes)
            decision = self.allocator.place_gang(
                members, nodes, usage, domains=domains, changes=snapshot
            )
            if not decision.placed and topology.required:
                return GangPlacement(ok=False, reason=decision.reasons[0])
        if decision is None or not decision.placed:
            decision = self.allocator.place_gang(members, nodes, usage, changes=snapshot)
        return self._checked([p for p, _c in pods], decision)

    def _checked(self, pods: Sequence[PodRequest], decision: GangDecision) -> GangPlacement:
        """The gang's placement once every member's rest fits with the others on its node."""
        if not decision.placed:
            return GangPlacement(ok=False, reason=decision.reasons[0])
        snapshot, placed = self.placer.snapshot, []
        try:
            for pod, got in zip(pods, decision.pods, strict=True):
                if got.node is None or len(got.gpus) != pod.gpus:
                    return GangPlacement(ok=False, reason=f"pod {pod.key}: its claims' GPUs")
                if self.placer.assignment_on(replace(pod, gpus=0), got.node) is None:
                    return GangPlacement(ok=False, reason=f"pod {pod.key}: no room on {got.node}")
                assignment = Assignment(node=got.node, gpus=got.gpus)
                snapshot.assume(pod, assignment)
                placed.append((pod.key, assignment))
        finally:
            for key, _assignment in reversed(placed):
                snapshot.forget(key)
        return GangPlacement(ok=True, assignments=dict(placed))

    def fit(self, pod: PodRequest, claims: Sequence[ResourceClaim]) -> ClaimFit:
        """`pod`'s claims as one victim search asks them (`DeviceFit`)."""
        return ClaimFit(self, [PodClaims(key=pod.key, claims=tuple(claims))])

    def gang_fit(self, pods: Sequence[tuple[PodRequest, Sequence[ResourceClaim]]]) -> ClaimFit:
        """A gang's claims, each member's its own, as one victim search asks them
        (`GangDeviceFit`)."""
        return ClaimFit(self, [PodClaims(key=p.key, claims=_own(p.key, c)) for p, c in pods])

    def _listed(self, names: Sequence[str]) -> tuple[ClaimNode, ...]:
        """The nodes named, as claims see them: the tuple made before for the same names while
        no node was added, replaced or removed (a view holds its node's state object); a
        tuple of names given before (the placer's unchanged `feasible`) is known by identity,
        with no pass over its names."""
        version = self.placer.snapshot.nodes_version
        given = self._given.get(id(names))
        if given is not None and given[0] is names and given[1] == version:
            return given[2]
        key = tuple(names)
        found = self._lists.get(key)
        if found is not None and found[0] == version:
            nodes = found[1]
        else:
            if len(self._lists) >= 8:
                self._lists.clear()
            nodes = tuple(self._node(n) for n in key)
            self._lists[key] = (version, nodes)
        if key is names:  # a tuple was given
            if len(self._given) >= 8:
                self._given.clear()
            self._given[id(key)] = (key, version, nodes)
        return nodes

    def _in_use(self) -> Usage:
        """The GPUs that have anything on them, as held devices: one `Usage` brought up to the
        snapshot through its change log (a node changed since is looked at again, its GPUs
        released or held), so that its verdicts follow it node by node; made again when the
        log no longer reaches back."""
        snapshot, followed = self.placer.snapshot, self._followed
        changed: Sequence[str] | None = None
        if followed is not None and followed[0] is snapshot:
            changed = snapshot.changed_since(followed[1])
        if changed is None:
            self._usage, self._held = Usage(), {}
            changed = snapshot.names()
        self._followed = (snapshot, snapshot.generation)
        for name in changed:
            held = self._held_on(name) if name in snapshot else frozenset()
            before = self._held.get(name, frozenset())
            if held == before:
                continue
            self._usage.release(before - held)
            self._usage.add([AllocatedDevice(request="placed", id=d) for d in held - before])
            self._held[name] = held
        return self._usage

    def _held_on(self, name: str) -> frozenset[DeviceId]:
        node = self._node(name)
        state = node.state
        if state is None or node.gpus is None:
            return frozenset()
        mask = state.idle_mask
        return frozenset(d for d, g in node.gpus.whole.items() if not mask >> g & 1)

    def _node(self, name: str) -> ClaimNode:
        state = self.placer.snapshot.node(name)
        found = self._nodes.get(name)
        if found is None or found.state is not state:
            found = self._nodes[name] = claim_node(state)
        return found


class ClaimFit:
    """Whether a unit's claims fit once some pods are gone, judged by the claims code on
    clones of the nodes without them (their GPUs then idle), each answer worked out once: one
    pod's on a node (`fits`, a `DeviceFit`), or a gang's members' on some nodes, all of them or
    none (`place`, a `GangDeviceFit`). For one search: the cluster must not change meanwhile."""

    def __init__(self, sim: SimClaims, pods: Sequence[PodClaims]) -> None:
        self._sim, self._pods = sim, pods
        shared = sim.allocator  # its compiled selectors; verdicts of its own, on the clones
        self._allocator = ClaimAllocator(
            shared.classes, scoring=shared.scoring, selectors=shared.selectors
        )
        self._found: dict[tuple[tuple[str, ...], frozenset[str]], Mapping[str, str] | None] = {}

    def fits(self, node: str, gone: frozenset[str]) -> bool:
        return self.place([node], gone) is not None

    def place(self, nodes: Sequence[str], gone: frozenset[str]) -> Mapping[str, str] | None:
        snapshot = self._sim.placer.snapshot
        here = frozenset(k for n in nodes for k in snapshot.node(n).pods if k in gone)
        key = (tuple(nodes), here)
        if key not in self._found:
            views = [claim_node(_without(snapshot.node(n), here)) for n in nodes]
            decision = self._allocator.place_gang(self._pods, views, _usage(views))
            self._found[key] = (
                {p.key: d.node for p, d in zip(self._pods, decision.pods, strict=True) if d.node}
                if decision.placed
                else None
            )
        return self._found[key]


def _outside(names: Sequence[str], excluded: AbstractSet[str] | None) -> Sequence[str]:
    """`names` less those `excluded` (the list itself when nothing is)."""
    return [n for n in names if n not in excluded] if excluded else names


def _without(node: NodeState, gone: AbstractSet[str]) -> NodeState:
    """`node`, or a clone of it without the pods `gone` when any of them is on it."""
    if not any(key in node.pods for key in gone):
        return node
    clone = node.clone()
    for key in gone:
        if key in clone.pods:
            clone.remove_pod(key)
    return clone


def _own(pod: str, claims: Sequence[ResourceClaim]) -> tuple[ResourceClaim, ...]:
    """A member's claims named after it, so that no two members share one."""
    return tuple(replace(c, key=ClaimKey(c.key.namespace, f"{pod}.{c.key.name}")) for c in claims)


def _domains(
    values: Mapping[str, AbstractSet[str]], nodes: Sequence[ClaimNode]
) -> dict[str, list[ClaimNode]]:
    """Each domain's nodes among `nodes` (domains with none left out)."""
    found = {v: [n for n in nodes if n.name in names] for v, names in values.items()}
    return {v: members for v, members in found.items() if members}


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
