"""One node's placement state (`NodeState`) from its Node object, its NRT and the pods on it.

Counting (DESIGN §7): free capacity is the Node's allocatable minus the requests of every
non-terminal pod bound or assumed there, whichever scheduler placed it. The NodeResourceTopology
adds *which* GPUs, MIG devices and NUMA nodes those are:

- Structure (GPUs, MIG layout, NVLink matrix, NUMA, topology manager policy) always comes from a
  decodable NRT; devices the NRT reports unhealthy (allocatable 0) are never free.
- Which devices are free comes from the NRT only when it is *trusted*: its pods fingerprint
  (pfp0v001) equals the fingerprint of the pods the cache has on the node, counted by the NRT's
  method. The NRT names the devices taken, not their pods: each pod holding devices is charged
  with taken ones (those this scheduler assigned it where they are taken, else as the kubelet
  would pick among the taken), so that a pod taken out (a victim in the victim search) frees
  its devices; taken devices no pod explains stay taken (`_trusted_state`).
- Otherwise each pod is charged with the devices the kubelet would pick (`choose_devices`, the same
  code as the device plugin's GetPreferredAllocation), or with the devices this scheduler assigned.

Without an NRT the node's GPUs are `nvidia.com/gpu` anonymous GPUs plus one MIG pseudo-GPU holding
the node's `nvidia.com/mig-*` devices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.fingerprint import METHOD_WITH_EXCLUSIVE_RESOURCES, pods_fingerprint
from agent.gpuset import GpuSelector
from agent.model import MILLI_PER_GPU, MigMode
from agent.nrt import DecodedTopology
from agent.resource_names import GPU_RESOURCE, mig_profile
from agent.shares import GPU_MEMORY, SHARED_GPU_RESOURCE, Sharing
from scheduler.placement import (
    Assignment,
    Effect,
    NodeState,
    PodRequest,
    Taint,
    TopologyPolicy,
    choose_devices,
)
from scheduler.placement.load import hold_measured_use
from scheduler.placement.shares import share_asks
from scheduler.runtime.cluster.loadview import LoadView
from scheduler.runtime.cluster.podinfo import PodInfo
from scheduler.runtime.cluster.podspec import ResourceList, resource_list
from scheduler.runtime.cluster.sharecharge import Counted, hold_nrt_use, nrt_shares, pod_shares_on

Obj = Mapping[str, Any]
_Free = tuple[list[int], list[dict[str, int]]]  # per GPU: free milli-GPU, free MIG devices


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    """What the scheduler reads from a Node object."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: Mapping[str, int]


class AllocatableMemo:
    """Parsed `status.allocatable` maps by their content: the nodes of one shape (thousands of
    them, listed at every start) share one reading, which nobody changes (`NodeInfo` is
    frozen; a node state copies it). At most `size` shapes, then it starts again."""

    def __init__(self, size: int = 256) -> None:
        self._by_content: dict[tuple[tuple[object, object], ...], ResourceList] = {}
        self._size = size

    def read(self, raw: Obj | None) -> Mapping[str, int]:
        """`raw` parsed (`resource_list`); ValueError names the field and the resource."""
        try:
            content = tuple((raw or {}).items())
            known = self._by_content.get(content)
        except (TypeError, AttributeError):  # not a map of plain values: parse says why
            return resource_list(raw, "status.allocatable")
        if known is None:
            known = resource_list(raw, "status.allocatable")
            if len(self._by_content) >= self._size:
                self._by_content.clear()
            self._by_content[content] = known
        return known


def parse_node(obj: Obj, memo: AllocatableMemo | None = None) -> NodeInfo:
    """The scheduler's view of a Node; ValueError names the node and the field. `memo`: the
    allocatable maps read before, reused for a node of the same shape."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    name = str(meta.get("name") or "")
    try:
        taints = []
        for i, raw in enumerate(spec.get("taints") or ()):
            try:
                effect = Effect(raw.get("effect"))
            except ValueError:
                raise ValueError(f"spec.taints[{i}].effect: {raw.get('effect')!r}") from None
            taints.append(
                Taint(key=str(raw["key"]), value=str(raw.get("value") or ""), effect=effect)
            )
        raw = (obj.get("status") or {}).get("allocatable")
        if memo is not None:
            allocatable = memo.read(raw)
        else:
            allocatable = resource_list(raw, "status.allocatable")
        return NodeInfo(
            name=name,
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            taints=tuple(taints),
            unschedulable=bool(spec.get("unschedulable")),
            allocatable=allocatable,
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"node {name}: {exc}") from None


@dataclass(slots=True)
class SelectorCache:
    """One `GpuSelector` per distinct link matrix and NUMA layout (shared by identical nodes)."""

    by_layout: dict[tuple[Any, ...], GpuSelector] = field(default_factory=dict)

    def get(self, nrt: DecodedTopology) -> GpuSelector:
        numa = tuple(g.numa_node for g in nrt.inventory.gpus)
        key = (nrt.inventory.links, numa)
        if key not in self.by_layout:
            self.by_layout[key] = GpuSelector(nrt.inventory.links, numa)
        return self.by_layout[key]


def exclusive(request: PodRequest) -> bool:
    """Pods the `with-exclusive-resources` fingerprint method counts: devices or Guaranteed."""
    return request.guaranteed or any("/" in name for name, _ in request.vector)


def is_trusted(nrt: DecodedTopology, pods: Sequence[PodInfo]) -> bool:
    """True when the NRT's pods fingerprint matches the pods the cache has on the node."""
    if not nrt.fingerprint:
        return False
    counted = pods
    if nrt.availability.fingerprint_method == METHOD_WITH_EXCLUSIVE_RESOURCES:
        counted = [p for p in pods if exclusive(p.request)]
    return pods_fingerprint((p.namespace, p.name) for p in counted) == nrt.fingerprint


def _policy(nrt: DecodedTopology) -> TopologyPolicy:
    try:
        return TopologyPolicy(nrt.topology_manager_policy)
    except ValueError:
        return TopologyPolicy.NONE


def _numa_free(nrt: DecodedTopology) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for zone in nrt.availability.numa:
        counts = {r.name: r.available for r in zone.resources}
        out[zone.numa_id] = {"cpu": counts.get("cpu", 0), "memory": counts.get("memory", 0)}
    return out


def _device_free(nrt: DecodedTopology, trusted: bool) -> _Free:
    """Per GPU: free milli-GPU and free MIG devices by profile. Unhealthy devices (allocatable 0)
    are never free; with a trusted NRT only its available ones are."""
    gpu_free: list[int] = []
    mig_free: list[dict[str, int]] = []
    for gpu in nrt.inventory.gpus:
        counts = nrt.gpu_counts(gpu.index) if gpu.index < len(nrt.availability.gpus) else {}
        layout: dict[str, int] = {}
        for mig in gpu.mig_devices:
            layout[mig.profile] = layout.get(mig.profile, 0) + 1
        for name, res in counts.items():
            profile = mig_profile(name)
            if profile is not None and profile in layout:
                free = res.available if trusted else res.allocatable
                layout[profile] = min(free, layout[profile])
        whole = counts.get(GPU_RESOURCE)
        free_gpu = whole is not None and (whole.available if trusted else whole.allocatable) > 0
        is_mig = gpu.mig_mode is MigMode.ENABLED
        gpu_free.append(MILLI_PER_GPU if free_gpu and not is_mig else 0)
        mig_free.append(layout)
    return gpu_free, mig_free


_Shape = tuple[tuple[tuple[str, int], ...], tuple[Taint, ...], bool]


class NodeShapes:
    """The state every node of one shape (allocatable, taints, unschedulable) starts from when
    it has no NRT, built once per shape: its nodes start as copies of it and so share what is
    derived from it (`NodeState.copy_as`). Owned by the cache; at most `size` shapes, then it
    starts again."""

    def __init__(self, size: int = 256) -> None:
        self._templates: dict[_Shape, NodeState] = {}
        self._size = size

    def fallback_state(self, info: NodeInfo) -> NodeState:
        """The node from its allocatable alone, as a copy of its shape's starting state."""
        shape = (tuple(sorted(info.allocatable.items())), info.taints, info.unschedulable)
        template = self._templates.get(shape)
        if template is None:
            if len(self._templates) >= self._size:
                self._templates.clear()
            template = self._templates[shape] = _fallback_template(shape)
        return template.copy_as(info.name, info.labels)


def _fallback_template(shape: _Shape) -> NodeState:
    items, taints, unschedulable = shape
    allocatable = dict(items)
    whole = allocatable.get(GPU_RESOURCE, 0)
    mig = {p: c for n, c in items if (p := mig_profile(n)) is not None}
    count = whole + (1 if mig else 0)
    return NodeState(
        name="",
        taints=taints,
        unschedulable=unschedulable,
        allocatable=allocatable,
        gpu_numa=(None,) * count,
        gpu_free=[MILLI_PER_GPU] * whole + ([0] if mig else []),
        gpu_mig=(False,) * whole + ((True,) if mig else ()),
        mig_free=[{} for _ in range(whole)] + ([dict(mig)] if mig else []),
    )


def _shared(nrt: DecodedTopology) -> tuple[tuple[int, ...], tuple[int, ...], str | None, list[int]]:
    """Per GPU from the NRT's GPU zones (DESIGN §12): replica slots (0: not shared), memory in
    bytes, the replica resource and the slots that are healthy (allocatable 0: unhealthy)."""
    slots: list[int] = []
    memory: list[int] = []
    healthy: list[int] = []
    resource: str | None = None
    for gpu in nrt.inventory.gpus:
        zone = nrt.availability.gpus[gpu.index] if gpu.index < len(nrt.availability.gpus) else None
        counts = nrt.gpu_counts(gpu.index) if zone is not None else {}
        shares = zone.shares if zone is not None and zone.sharing is not Sharing.NONE else 0
        replica = next((r for r in (SHARED_GPU_RESOURCE, GPU_RESOURCE) if r in counts), None)
        if shares and replica is not None:
            resource = replica
        size = counts.get(GPU_MEMORY)
        slots.append(shares if replica is not None else 0)
        memory.append(size.allocatable if size is not None else gpu.memory_mib << 20)
        healthy.append(min(shares, counts[replica].allocatable) if shares and replica else 0)
    return tuple(slots), tuple(memory), resource, healthy


@dataclass(frozen=True, slots=True)
class _NrtShape:
    """What every state of one node built from its NRT shares, read from it once."""

    info: NodeInfo
    nrt: DecodedTopology
    selector: GpuSelector
    shared: tuple[tuple[int, ...], tuple[int, ...], str | None, list[int]]

    @classmethod
    def read(cls, info: NodeInfo, nrt: DecodedTopology, selectors: SelectorCache) -> _NrtShape:
        return cls(info, nrt, selectors.get(nrt), _shared(nrt))

    def state(self, free: _Free) -> NodeState:
        """The node from its NRT's structure, `free` its free milli-GPU and MIG devices per
        GPU."""
        info, nrt = self.info, self.nrt
        gpu_free, mig_free = free
        slots, memory, resource, healthy = self.shared
        return NodeState(
            name=info.name,
            labels=info.labels,
            taints=info.taints,
            unschedulable=info.unschedulable,
            allocatable=dict(info.allocatable),
            gpu_numa=tuple(g.numa_node for g in nrt.inventory.gpus),
            gpu_free=gpu_free,
            gpu_mig=tuple(g.mig_mode is MigMode.ENABLED for g in nrt.inventory.gpus),
            mig_free=mig_free,
            links=nrt.inventory.links,
            topology_policy=_policy(nrt),
            numa_free=_numa_free(nrt),
            selector=self.selector,
            gpu_slots=slots,
            gpu_memory=memory,
            share_resource=resource,
            slots_free=list(healthy),
            memory_free=list(memory),
            compute_free=[100] * len(slots),
        )


def build_node_state(
    info: NodeInfo,
    nrt: DecodedTopology | None,
    pods: Sequence[PodInfo],
    selectors: SelectorCache,
    shapes: NodeShapes | None = None,
    load: LoadView | None = None,
) -> NodeState:
    """The node's state with every pod in `pods` charged; `shapes`: the cache's starting states
    per node shape (None: build this node's own); `load`: what its shared GPUs measurably use
    is charged too (`placement.load`), judged at `load.now`."""
    if nrt is not None and len(nrt.inventory.gpus) == 0 and info.allocatable.get(GPU_RESOURCE):
        nrt = None  # an NRT without GPUs says nothing about this GPU node's devices
    taken: dict[str, Assignment] | None = None
    if nrt is None:
        state = (shapes or NodeShapes(1)).fallback_state(info)
    elif is_trusted(nrt, pods):
        state, taken = _trusted_state(info, nrt, pods, selectors)
    else:
        state = _NrtShape.read(info, nrt, selectors).state(_device_free(nrt, trusted=False))
    uuids = {} if nrt is None else {str(g.uuid): g.index for g in nrt.inventory.gpus}
    _charge(state, pods, taken, uuids, {} if nrt is None else nrt_shares(nrt))
    if nrt is not None and state.shared_gpus:
        hold_nrt_use(state, nrt)
        if load is not None:
            hold_measured_use(state, load.uses(nrt))
    return state


def _trusted_state(
    info: NodeInfo, nrt: DecodedTopology, pods: Sequence[PodInfo], selectors: SelectorCache
) -> tuple[NodeState, dict[str, Assignment]]:
    """The node from a trusted NRT, and the devices each pod holding some is charged with.

    The NRT says which devices are taken, not by whom: each pod (the ones this scheduler
    assigned first) gets devices among the taken ones (its assignment where they are, else as
    the kubelet would pick among them), so that a pod removed (a victim the search takes out,
    a pod deleted) frees devices. Taken devices no pod explains stay taken."""
    shape = _NrtShape.read(info, nrt, selectors)
    free = _device_free(nrt, trusted=True)
    holding = [p for p in pods if p.request.gpus or p.request.mig]
    if not holding:
        return shape.state(free), {}
    healthy = _device_free(nrt, trusted=False)
    probe = shape.state(_less(healthy, free))
    taken: dict[str, Assignment] = {}  # the probe: the taken devices, as if they alone were free
    for pod in sorted(holding, key=lambda p: (p.assignment is None, p.request.key)):
        request = pod.request
        if share_asks(request, probe):
            continue
        assignment = pod.assignment
        if assignment is None or not _devices_free(probe, assignment):
            assignment = choose_devices(request, probe, None)
        if assignment is not None:
            probe.add_pod(request, assignment)
            taken[request.key] = assignment
    unexplained = (probe.gpu_free, probe.mig_free)  # taken, by no pod the cache has
    start = _less(healthy, unexplained)
    return shape.state(start), taken


def _less(free: _Free, less: _Free) -> _Free:
    """Per GPU, the milli-GPU and the MIG devices of `free` less those of `less`."""
    gpus = [f - n for f, n in zip(free[0], less[0], strict=True)]
    migs = [
        {p: n - fewer.get(p, 0) for p, n in have.items()}
        for have, fewer in zip(free[1], less[1], strict=True)
    ]
    return gpus, migs


def _charge(
    state: NodeState,
    pods: Sequence[PodInfo],
    taken: Mapping[str, Assignment] | None,
    uuids: Mapping[str, int],
    counted: Mapping[str, Counted],
) -> None:
    """Charge every pod: shares as `pod_shares_on` says (what this scheduler assigned, what the
    NRT counts, the annotation, equal splits; DESIGN §12); other devices, with a trusted NRT, as
    `taken` says (`_trusted_state`; resources only for a pod it does not name), else as
    assigned, or as the kubelet would pick them."""
    if not pods:
        return
    bare = Assignment(node=state.name)
    ordered = sorted(
        pods,
        key=lambda p: (p.assignment is None, p.uid not in counted, not p.share_gpus, p.request.key),
    )
    for pod in ordered:
        if share_asks(pod.request, state):
            shares = pod_shares_on(state, pod, uuids, counted.get(pod.uid, ()))
            state.add_pod(pod.request, shares)
            continue
        if taken is not None:
            state.add_pod(pod.request, taken.get(pod.request.key, bare))
            continue
        assignment = (
            pod.assignment if pod.assignment and _devices_free(state, pod.assignment) else None
        )
        if assignment is None:
            assignment = choose_devices(pod.request, state, None) or bare
        state.add_pod(pod.request, assignment)


def _devices_free(state: NodeState, assignment: Assignment) -> bool:
    """True when every device of `assignment` is still free on `state`."""
    if any(g >= state.gpu_count or state.gpu_free[g] < MILLI_PER_GPU for g in assignment.gpus):
        return False
    for share in assignment.shares:
        if share.gpu >= state.gpu_count or state.gpu_free[share.gpu] < share.milli:
            return False
    needed: dict[tuple[int, str], int] = {}
    for g, profile in assignment.mig:
        needed[(g, profile)] = needed.get((g, profile), 0) + 1
    return all(
        g < state.gpu_count and state.mig_free[g].get(p, 0) >= n for (g, p), n in needed.items()
    )
