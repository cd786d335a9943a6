"""Gang placement: every member of a pod group fits on one snapshot, or none is placed (DESIGN §7).

Members are decided one by one by the caller's `Placer`, each charged to its snapshot so the next
one sees it, largest first (whole GPUs, then GPU share and MIG devices, then cpu, memory, key).
Whatever the outcome, every charge is undone before returning: the snapshot is left exactly as it
was, and the caller assumes the returned assignments itself.

Topology domains: the nodes sharing one value of a node label (`gputopo.io/rack`, ...). With a
`required` constraint the gang must fit inside one domain; with `preferred` it tries each domain
and then the whole cluster. Domains are tried tightest first: the fewest free milli-GPU that still
covers the gang's GPU demand; among domains equally tight (up to `_TIE_TRIES` of them) the one whose
placement touches the fewest nodes, then the label value (a placement on as few nodes as the
gang's whole GPUs need on the biggest node, `_fewest_nodes`, cannot be beaten: the search ends
there). A domain's nodes are passed as one frozen set (`Domain.members`), which the `Placer`
turns into node slots once and ranks on their own, so a member costs the domain's size, not the
cluster's. Nodes without the label belong to no domain. With `prefer_clique`, a GPU gang without
a constraint prefers one NVLink clique (`nvidia.com/gpu.clique`, DESIGN §13) when any node
carries that label, so whole racks stay free for the next big gang.

A group's domain holds for all its members, as kube-scheduler 1.37 keeps a PodGroup's pods in the
domain its scheduled pods are in: once members hold places (`placed_domain` names their domain),
later members go only there (members beyond `minMember`, replacements, a `basic` group's pods).
A `basic` group with no member placed yet starts in the
domain that holds the most of its pending pods (`place_most_in_one_domain`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from agent.model import MILLI_PER_GPU

from .node import Assignment
from .pick import Decision
from .placer import Placer
from .request import PodRequest
from .snapshot import Domain, Snapshot

__all__ = [
    "CLIQUE_LABEL",
    "GangPlacement",
    "TopologyConstraint",
    "domains_holding",
    "excluding_outside",
    "member_domains",
    "place_gang",
    "place_most_in_one_domain",
    "placed_domain",
    "topology_domains",
]

_NO_ASSIGNMENTS: Mapping[str, Assignment] = MappingProxyType({})
CLIQUE_LABEL = "nvidia.com/gpu.clique"
_TIE_TRIES = 4  # equally tight domains placed to compare the nodes they touch
_NAMED = 6  # domains a reason names before "and N more"
_Explain = Literal["every node", "candidates", "none"]
"""Which nodes a member's refusal counts reasons on (`Placer.decide`'s `explain`), or none."""


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
    prefer_clique: bool = False,
    reasons: bool = True,
) -> GangPlacement:
    """Place every pod of `pods` or none on `placer.snapshot`, which is unchanged on return;
    never on `excluded` (nodes held for other pods). `prefer_clique`: without `topology`, a GPU
    gang prefers one `CLIQUE_LABEL` domain when nodes carry the label. `reasons` False: no
    member's refusal is explained (no `failed`, and no `reason` but the domains' or
    `min_resources`', which cost nothing), for a caller that reads `ok` and the assignments
    alone; the placements are the same.

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
    if topology is None and prefer_clique:
        topology = _default_topology(snapshot, ordered)
    explain: _Explain = "every node" if reasons else "none"
    if topology is None:
        return _place_in(ordered, placer, (None, excluded), None, explain=explain)
    result = _in_one_domain(ordered, placer, topology.label, excluded, reasons)
    if result.ok:
        return result
    if not topology.required:
        return _place_in(ordered, placer, (None, excluded), None, explain=explain)
    if not snapshot.domains(topology.label):
        return GangPlacement(ok=False, reason=f"no node has the topology label {topology.label}")
    return replace(result, reason=_no_domain_reason(snapshot, topology.label, ordered))


def placed_domain(snapshot: Snapshot, label: str, nodes: Iterable[str]) -> tuple[str | None, str]:
    """The value of `label` on the nodes a group's members hold: (value, ""); (None, "") when
    none of those nodes is in the snapshot with the label; (None, why) when they span more than
    one value (the label changed under them, or a preferred constraint let them spread)."""
    values = sorted(
        {
            value
            for name in nodes
            if name in snapshot and (value := snapshot.node(name).labels.get(label)) is not None
        }
    )
    if len(values) > 1:
        named = ", ".join(values[:_NAMED]) + ("" if len(values) <= _NAMED else ", ...")
        return None, f"its placed members are in {len(values)} {label} domains ({named}), not one"
    return (values[0] if values else None), ""


def member_domains(
    snapshot: Snapshot, topology: TopologyConstraint | None, placed_nodes: Iterable[str]
) -> list[frozenset[str] | None] | str:
    """Where a group's next members may go, in the order to try: the nodes of the domain its
    placed members are in (`placed_domain`), then, under a preferred constraint, anywhere
    (None); anywhere without a constraint or a labelled placed member. Why nowhere, when a
    required constraint's placed members span two domains (kube-scheduler refuses those too)."""
    if topology is None:
        return [None]
    value, spread = placed_domain(snapshot, topology.label, placed_nodes)
    if spread:
        return spread if topology.required else [None]
    if value is None:
        return [None]
    inside = snapshot.domains(topology.label)[value].members()
    return [inside] if topology.required else [inside, None]


def excluding_outside(
    snapshot: Snapshot, excluded: AbstractSet[str] | None, allowed: frozenset[str] | None
) -> AbstractSet[str] | None:
    """`excluded` and, when a pod may go only to `allowed`, every node outside it: for the
    placements that take nodes to avoid and no allowed set (claims, the simulator's policies)."""
    if allowed is None:
        return excluded
    outside = frozenset(n for n in snapshot.names() if n not in allowed)
    return outside | excluded if excluded else outside


def place_most_in_one_domain(
    pods: Sequence[PodRequest],
    placer: Placer,
    topology: TopologyConstraint,
    *,
    least: int = 1,
    excluded: AbstractSet[str] | None = None,
    min_resources: Mapping[str, int] | None = None,
) -> GangPlacement:
    """The longest prefix of `pods` (in their order), of at least `least` pods (a gang's
    minimum), that one domain holds, placed as a gang (`place_gang`, with `min_resources`):
    every pod when they all fit; else found by halving (each try a gang placement); not ok,
    with the whole group's reason, when not even `least` of them fit."""
    whole = place_gang(
        pods, placer, topology=topology, excluded=excluded, min_resources=min_resources
    )
    if whole.ok:
        return whole
    best: GangPlacement | None = None
    low, high = max(1, least), len(pods) - 1
    while low <= high:
        middle = (low + high) // 2
        tried = place_gang(
            pods[:middle],
            placer,
            topology=topology,
            excluded=excluded,
            min_resources=min_resources,
            reasons=False,
        )
        if tried.ok:
            best, low = tried, middle + 1
        else:
            high = middle - 1
    return best if best is not None else whole


def _default_topology(snapshot: Snapshot, pods: Sequence[PodRequest]) -> TopologyConstraint | None:
    """One clique preferred for a GPU gang when the cluster has clique-labelled nodes."""
    if not any(p.gpu_milli_total for p in pods) or not snapshot.domains(CLIQUE_LABEL):
        return None
    return TopologyConstraint(label=CLIQUE_LABEL, required=False)


def _in_one_domain(
    ordered: Sequence[PodRequest],
    placer: Placer,
    label: str,
    excluded: AbstractSet[str] | None,
    reasons: bool,
) -> GangPlacement:
    """The gang inside the tightest domain that holds it (ties: fewest nodes touched, then
    value); not ok (`failed`: the first refusal seen, with `reasons`) when none does."""
    best: tuple[int, int, GangPlacement] | None = None
    failed: Decision | None = None
    tries = 0
    fewest = _fewest_nodes(placer.snapshot, ordered)
    for free, value, domain in _ordered_domains(placer.snapshot, label, ordered):
        if best is not None and (free != best[0] or tries >= _TIE_TRIES or best[1] <= fewest):
            break
        where = (domain.members(), excluded)
        result = _place_in(
            ordered, placer, where, value, explain="candidates" if reasons else "none"
        )
        if not result.ok:
            failed = failed or result.failed
            continue
        tries += 1
        touched = len({a.node for a in result.assignments.values()})
        if best is None or touched < best[1]:
            best = (free, touched, result)
    return best[2] if best is not None else GangPlacement(ok=False, failed=failed)


def _no_domain_reason(snapshot: Snapshot, label: str, pods: Sequence[PodRequest]) -> str:
    """Names the level, the gang's GPUs, the most free GPUs of any domain and the domains."""
    domains = snapshot.domains(label)
    ranked = sorted(domains, key=lambda value: (-domains[value].free_milli, value))
    named = ", ".join(ranked[:_NAMED])
    if len(ranked) > _NAMED:
        named += f" and {len(ranked) - _NAMED} more"
    most = domains[ranked[0]].free_milli / MILLI_PER_GPU
    need = sum(p.gpu_milli_total for p in pods) / MILLI_PER_GPU
    return (
        f"no {label} domain holds the whole pod group ({need:g} GPUs; the most free GPUs in one "
        f"is {most:g}; considered: {named})"
    )


def _place_in(
    ordered: Sequence[PodRequest],
    placer: Placer,
    where: tuple[frozenset[str] | None, AbstractSet[str] | None],
    domain: str | None,
    *,
    explain: _Explain,
) -> GangPlacement:
    """`where`: (allowed, excluded) nodes; `explain`: which nodes a refusal's reasons count
    (`Placer.decide`'s `explain`), or none."""
    snapshot = placer.snapshot
    allowed, excluded = where
    placed: list[tuple[PodRequest, Assignment]] = []
    previous = _previously_assumed(snapshot, ordered)
    # Members assumed before are assumed again at the end, not where they were among a node's
    # pods: only a trial without them leaves the snapshot exactly as it was.
    with nullcontext() if previous else placer.trial():
        try:
            for pod, _assignment in previous:
                snapshot.forget(pod.key)
            for pod in ordered:
                if explain == "none":
                    found = placer.best_assignment(pod, allowed=allowed, excluded=excluded)
                    if found is None:
                        return GangPlacement(ok=False, domain=domain)
                else:
                    every = explain == "every node"
                    decision = placer.decide(pod, allowed=allowed, explain=every, excluded=excluded)
                    if decision.assignment is None:
                        return GangPlacement(
                            ok=False, reason=decision.message(), failed=decision, domain=domain
                        )
                    found = decision.assignment
                snapshot.assume(pod, found)
                placed.append((pod, found))
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


def domains_holding(
    snapshot: Snapshot, label: str, pods: Sequence[PodRequest]
) -> list[frozenset[str]]:
    """The nodes of each domain of `label` with free GPUs enough for `pods`, tightest first
    (the order a gang tries them in)."""
    return [domain.members() for _, _, domain in _ordered_domains(snapshot, label, pods)]


def topology_domains(snapshot: Snapshot, label: str) -> dict[str, frozenset[str]]:
    """Label value -> node names, for the nodes that carry `label`."""
    return {value: d.members() for value, d in snapshot.domains(label).items()}


def _ordered_domains(
    snapshot: Snapshot, label: str, pods: Sequence[PodRequest]
) -> list[tuple[int, str, Domain]]:
    """(free milli-GPU, value, domain) of the domains with enough free milli-GPU for the gang,
    tightest first, then by label value."""
    demand = sum(p.gpu_milli_total for p in pods)
    ranked = sorted(
        (d.free_milli, value)
        for value, d in snapshot.domains(label).items()
        if d.free_milli >= demand
    )
    domains = snapshot.domains(label)
    return [(free, value, domains[value]) for free, value in ranked]


def _fewest_nodes(snapshot: Snapshot, pods: Sequence[PodRequest]) -> int:
    """At least how many nodes any placement of `pods` touches: their whole GPUs over the most
    one node can give (`Snapshot.most_whole_gpus`), and one."""
    gpus, most = sum(p.gpus for p in pods), snapshot.most_whole_gpus
    return max(1, -(-gpus // most)) if most else 1


def _short_of(free: Mapping[str, int], want: Mapping[str, int]) -> str | None:
    for resource in sorted(want):
        if free.get(resource, 0) < want[resource]:
            return resource
    return None


def _size_key(pod: PodRequest) -> tuple[int, int, int, int, str]:
    mig = sum(pod.mig.values())
    return (-pod.gpus, -(pod.gpu_milli + mig), -pod.cpu_milli, -pod.memory, pod.key)
