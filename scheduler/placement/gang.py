"""Gang placement: every member of a pod group fits on one snapshot, or none is placed (DESIGN §7).

Members are decided one by one by the caller's `Placer`, each charged to its snapshot so the next
one sees it, largest first (whole GPUs, then GPU share and MIG devices, then cpu, memory, key).
Whatever the outcome, every charge is undone before returning: the snapshot is left exactly as it
was, and the caller assumes the returned assignments itself.

Topology domains: the nodes sharing one value of a node label (`gputopo.io/rack`, ...). With a
`required` constraint the gang must fit inside one domain; with `preferred` it tries each domain
and then the whole cluster. Domains are tried tightest first: the fewest free milli-GPU that still
covers the gang's GPU demand, then the label value. Nodes without the label belong to no domain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType

from .node import Assignment
from .pick import Decision
from .placer import Placer
from .request import PodRequest
from .snapshot import Snapshot

__all__ = ["GangPlacement", "TopologyConstraint", "place_gang", "topology_domains"]

_NO_ASSIGNMENTS: Mapping[str, Assignment] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyConstraint:
    """Keep the gang inside one domain of node label `label`; `required` or only preferred."""

    label: str
    required: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class GangPlacement:
    """All members' assignments (pod key -> assignment) when `ok`; else why not.

    `failed`: the decision of the first member that did not fit (its `message()` is the reason a
    pending member shows), None when the gang failed before placing (minResources, no domain).
    """

    ok: bool
    assignments: Mapping[str, Assignment] = field(default_factory=lambda: _NO_ASSIGNMENTS)
    domain: str | None = None
    reason: str = ""
    failed: Decision | None = None


def place_gang(
    pods: Sequence[PodRequest],
    placer: Placer,
    *,
    topology: TopologyConstraint | None = None,
    min_resources: Mapping[str, int] | None = None,
    excluded: AbstractSet[str] | None = None,
) -> GangPlacement:
    """Place every pod of `pods` or none on `placer.snapshot`, which is unchanged on return;
    never on `excluded` (nodes held for other pods).

    `min_resources` (the PodGroup's `minResources`, canonical units) must be free in the cluster,
    else the gang fails with `Insufficient <resource> for the pod group's minResources`.
    """
    snapshot = placer.snapshot
    short = _short_of(snapshot.free_totals(), min_resources) if min_resources else None
    if short:
        return GangPlacement(
            ok=False, reason=f"Insufficient {short} for the pod group's minResources"
        )
    ordered = sorted(pods, key=_size_key)
    if topology is None:
        return _place_in(ordered, placer, (None, excluded), None, explain=True)
    domains = _ordered_domains(snapshot, topology.label, ordered)
    last: GangPlacement | None = None
    for value, names in domains:
        result = _place_in(ordered, placer, (names, excluded), value, explain=False)
        if result.ok:
            return result
        last = last or result
    if not topology.required:
        return _place_in(ordered, placer, (None, excluded), None, explain=True)
    if not snapshot.domains(topology.label):
        return GangPlacement(ok=False, reason=f"no node has the topology label {topology.label}")
    return GangPlacement(
        ok=False,
        reason=f"no {topology.label} domain fits the whole pod group",
        failed=None if last is None else last.failed,
    )


def _place_in(
    ordered: Sequence[PodRequest],
    placer: Placer,
    where: tuple[frozenset[str] | None, AbstractSet[str] | None],
    domain: str | None,
    *,
    explain: bool,
) -> GangPlacement:
    """`where`: (allowed, excluded) nodes."""
    snapshot = placer.snapshot
    allowed, excluded = where
    placed: list[tuple[PodRequest, Assignment]] = []
    previous = _previously_assumed(snapshot, ordered)
    try:
        for pod, _assignment in previous:
            snapshot.forget(pod.key)
        for pod in ordered:
            decision = placer.decide(pod, allowed=allowed, explain=explain, excluded=excluded)
            if decision.assignment is None:
                return GangPlacement(
                    ok=False, reason=decision.message(), failed=decision, domain=domain
                )
            snapshot.assume(pod, decision.assignment)
            placed.append((pod, decision.assignment))
    finally:
        for pod, _assignment in reversed(placed):
            snapshot.forget(pod.key)
        for pod, assignment in previous:
            snapshot.assume(pod, assignment)
    return GangPlacement(ok=True, assignments={p.key: a for p, a in placed}, domain=domain)


def _previously_assumed(
    snapshot: Snapshot, pods: Sequence[PodRequest]
) -> list[tuple[PodRequest, Assignment]]:
    """Members already assumed somewhere (a re-placement): restored after the attempt."""
    out = []
    for pod in pods:
        name = snapshot.node_of(pod.key)
        if name is not None:
            out.append(snapshot.node(name).pods[pod.key])
    return out


def topology_domains(snapshot: Snapshot, label: str) -> dict[str, frozenset[str]]:
    """Label value -> node names, for the nodes that carry `label`."""
    return {value: frozenset(d.names) for value, d in snapshot.domains(label).items()}


def _ordered_domains(
    snapshot: Snapshot, label: str, pods: Sequence[PodRequest]
) -> list[tuple[str, frozenset[str]]]:
    """Domains with enough free milli-GPU for the gang, tightest first, then by label value."""
    demand = sum(p.gpu_milli_total for p in pods)
    ranked = sorted(
        (d.free_milli, value, d.names)
        for value, d in snapshot.domains(label).items()
        if d.free_milli >= demand
    )
    return [(value, frozenset(names)) for _free, value, names in ranked]


def _short_of(free: Mapping[str, int], want: Mapping[str, int]) -> str | None:
    for resource in sorted(want):
        if free.get(resource, 0) < want[resource]:
            return resource
    return None


def _size_key(pod: PodRequest) -> tuple[int, int, int, int, str]:
    mig = sum(pod.mig.values())
    return (-pod.gpus, -(pod.gpu_milli + mig), -pod.cpu_milli, -pod.memory, pod.key)
