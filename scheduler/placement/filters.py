"""Filters for one pod on one node (DESIGN §7), in the stock scheduler's order and words.

Order: unschedulable, taints, node affinity/selector, resources, GPU model, devices (which GPUs /
MIG devices) with NUMA alignment. The first failing stage gives the node's reasons (resources may
give several, one per short resource, as NodeResourcesFit does). Reasons are the stock
scheduler's strings where one exists, so the runtime can aggregate them into
"0/12 nodes are available: 4 node(s) had untolerated taint {...}, 8 Insufficient nvidia.com/gpu."

Device choice (what the kubelet will hand out, since its GetPreferredAllocation is `select_gpus`):
whole GPUs by `select_gpus` over the free GPUs; GPU shares by `shares` (the fullest GPU that
still fits, lowest index on ties; replicas carry no NUMA node); MIG devices by `pack_shared`.
Under `single-numa-node` the NUMA node is the lowest id where everything fits (the kubelet's
choice); GPUs with an unknown NUMA node fit any.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from agent.gpuset import SharedSlot, pack_shared

from .gpushare import GpuShare
from .node import GPU_PRODUCT_LABEL, Assignment, NodeState, TopologyPolicy
from .request import CPU, MEMORY, PODS, Effect, PodRequest, Taint, mig_resource
from .shares import legacy_share, place_shares, share_asks, share_reason

__all__ = [
    "REASON_AFFINITY",
    "REASON_GPU_MODEL",
    "REASON_NUMA",
    "REASON_TOO_MANY_PODS",
    "REASON_UNSCHEDULABLE",
    "NodeFit",
    "ShareFit",
    "affinity_accepts",
    "choose_devices",
    "device_reason",
    "filter_node",
    "insufficient",
    "node_reasons",
    "share_devices",
    "untolerated",
    "untolerated_taint",
]

ShareFit = Callable[[PodRequest, NodeState, int | None], Assignment | None]
"""The devices of a pod that asks for GPU shares and nothing else on a node, on NUMA node `numa`
unless None (`share_devices`), or None when its shares do not fit there."""
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
REASON_GPU_MODEL = "node(s) didn't match Pod's GPU model"
REASON_NUMA = "node(s) cannot align the pod to one NUMA node (single-numa-node)"
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect=Effect.NO_SCHEDULE)


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


def untolerated(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


@dataclass(frozen=True, slots=True)
class NodeFit:
    """A node's verdict for a pod: an assignment when it fits, else the reasons (never both)."""

    assignment: Assignment | None
    reasons: tuple[str, ...] = ()


def filter_node(pod: PodRequest, node: NodeState, *, share_fit: ShareFit | None = None) -> NodeFit:
    """Run every filter; on success the assignment names the devices the pod would get.
    `share_fit`: `share_devices` (None) or a memo of it (`ShareMemo.fit`)."""
    reasons = node_reasons(pod, node)
    if reasons:
        return NodeFit(None, reasons)
    return _device_fit(pod, node, share_fit or share_devices)


def node_reasons(pod: PodRequest, node: NodeState) -> tuple[str, ...]:
    """The reasons of every filter before the devices' (`filter_node`'s first stages): empty
    when `pod` passes them on `node`."""
    reasons = _static_reasons(pod, node) or _resource_reasons(pod, node)
    if reasons:
        return reasons
    if pod.gpu_models and node.labels.get(GPU_PRODUCT_LABEL) not in pod.gpu_models:
        return (REASON_GPU_MODEL,)
    return ()


def _static_reasons(pod: PodRequest, node: NodeState) -> tuple[str, ...]:
    """Unschedulable, taints, affinity: what does not depend on the node's load."""
    if node.unschedulable and not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in pod.tolerations):
        return (REASON_UNSCHEDULABLE,)
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return (untolerated(taint),)
    if not affinity_accepts(pod, node.name, node.labels):
        return (REASON_AFFINITY,)
    return ()


def untolerated_taint(pod: PodRequest, node: NodeState) -> Taint | None:
    """The first `NoSchedule` or `NoExecute` taint of `node` that `pod` does not tolerate."""
    for taint in node.taints:
        if taint.effect is Effect.PREFER_NO_SCHEDULE:
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            return taint
    return None


def affinity_accepts(pod: PodRequest, name: str, labels: Mapping[str, str]) -> bool:
    """Do the pod's node selector and required node affinity accept node `name` with
    `labels`?"""
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return not pod.affinity or any(term.matches(name, labels) for term in pod.affinity)


def _resource_reasons(pod: PodRequest, node: NodeState) -> tuple[str, ...]:
    alloc, used = node.allocatable, node.requested
    out = []
    for name, qty in pod.vector:
        if alloc.get(name, 0) - used.get(name, 0) < qty:
            out.append(REASON_TOO_MANY_PODS if name == PODS else insufficient(name))
    return tuple(out)


def _device_fit(pod: PodRequest, node: NodeState, share_fit: ShareFit) -> NodeFit:
    anywhere = choose_devices(pod, node, None, share_fit=share_fit)
    if anywhere is None:
        return NodeFit(None, (device_reason(pod, node),))
    if node.topology_policy is not TopologyPolicy.SINGLE_NUMA_NODE:
        return NodeFit(anywhere)
    numa_known = node.numa_free is not None and pod.guaranteed
    if not pod.wants_gpu and not numa_known:
        return NodeFit(Assignment(node=node.name))
    for numa in _numa_ids(node):
        if numa_known and not _numa_has_room(pod, node, numa):
            continue
        assignment = choose_devices(pod, node, numa, share_fit=share_fit)
        if assignment is not None:
            return NodeFit(assignment)
    return NodeFit(None, (REASON_NUMA,))


def device_reason(pod: PodRequest, node: NodeState) -> str:
    """The reason of a node where `pod` passes `node_reasons` and its devices do not fit."""
    if share_asks(pod, node) or pod.shares:
        return share_reason(pod, node)
    if pod.gpus or pod.gpu_milli:
        return insufficient("nvidia.com/gpu")
    profile = sorted(p for p, n in pod.mig.items() if n > 0)[0]
    return insufficient(mig_resource(profile))


def _numa_ids(node: NodeState) -> list[int]:
    ids = {n for n in node.gpu_numa if n is not None}
    if node.numa_free is not None:
        ids.update(node.numa_free)
    return sorted(ids) or [0]


def _numa_has_room(pod: PodRequest, node: NodeState, numa: int) -> bool:
    zone = (node.numa_free or {}).get(numa)
    if zone is None:
        return False
    return zone.get(CPU, 0) >= pod.cpu_milli and zone.get(MEMORY, 0) >= pod.memory


def share_devices(pod: PodRequest, node: NodeState, numa: int | None) -> Assignment | None:
    """`choose_devices` for a pod whose only devices are GPU shares: where its share containers
    go (`place_shares`; replicas carry no NUMA node, so any shared GPU will do), or None."""
    placed = place_shares(pod, node)
    return None if placed is None else Assignment(node=node.name, shares=placed, numa=numa)


def choose_devices(
    pod: PodRequest, node: NodeState, numa: int | None, *, share_fit: ShareFit = share_devices
) -> Assignment | None:
    """The devices `pod` would get on `node` (only NUMA node `numa` unless None), or None.
    `share_fit` gives them for a pod that asks for GPU shares and nothing else."""
    if pod.shares and not pod.mig:
        return share_fit(pod, node, numa)

    def on_numa(g: int) -> bool:
        return numa is None or node.gpu_numa[g] is None or node.gpu_numa[g] == numa

    gpus: tuple[int, ...] = ()
    shares: tuple[GpuShare, ...] = ()
    if pod.shares or (pod.gpus and share_asks(pod, node)):
        placed = place_shares(pod, node)  # replicas carry no NUMA: any shared GPU will do
        if placed is None:
            return None
        shares = placed
    elif pod.gpus:
        picked = _pick_whole(node, numa, pod.gpus)
        if picked is None:
            return None
        gpus = picked
    if pod.gpu_milli:
        share = legacy_share(node, pod.gpu_milli, on_numa)
        if share is None:
            return None
        shares = (share,)
    mig: tuple[tuple[int, str], ...] = ()
    if pod.mig:
        picked_mig = _pick_mig(node, pod, [g for g in range(node.gpu_count) if on_numa(g)])
        if picked_mig is None:
            return None
        mig = picked_mig
    return Assignment(node=node.name, gpus=gpus, shares=shares, mig=mig, numa=numa)


def _pick_whole(node: NodeState, numa: int | None, count: int) -> tuple[int, ...] | None:
    sel = node.selector
    mask = node.idle_mask
    if numa is not None:
        mask &= sel.numa_mask(numa) if sel is not None else _numa_mask(node, numa)
    if mask.bit_count() < count:
        return None
    if sel is not None:
        return sel.select_mask(mask, 0, count)
    return tuple(g for g in range(node.gpu_count) if mask >> g & 1)[:count]


def _numa_mask(node: NodeState, numa: int) -> int:
    mask = 0
    for g, value in enumerate(node.gpu_numa):
        if value is None or value == numa:
            mask |= 1 << g
    return mask


def _pick_mig(
    node: NodeState, pod: PodRequest, gpus: Iterable[int]
) -> tuple[tuple[int, str], ...] | None:
    used = node.used_gpu_indices()
    out: list[tuple[int, str]] = []
    for profile in sorted(pod.mig):
        count = pod.mig[profile]
        if count <= 0:
            continue
        slots = [
            SharedSlot(f"{g}/{k}", g, node.gpu_numa[g])
            for g in gpus
            for k in range(node.mig_free[g].get(profile, 0))
        ]
        picked = pack_shared(slots, (), count, used | {g for g, _ in out})
        if not picked:
            return None
        out.extend((int(slot_id.split("/")[0]), profile) for slot_id in picked)
    return tuple(sorted(out))
