"""Which devices a request should try first on a node: the placement's preferences.

Without a `GpuMap` the order stays the node's (driver, pool, slice, device): first fit, as the
Kubernetes allocator does. With one (the node's GPUs, from its inventory), the search tries:

1. whole GPUs: the set `agent.gpuset` finds best (most NVLinks, then least PCIe distance, then
   fewest NUMA nodes, then lowest indices: the device plugin's choice for the same request),
   computed per value of the request's `matchAttribute` constraint when it has one (groups that
   hold enough devices first, better sets first), then the group's other GPUs by index;
2. shared devices (`allowMultipleAllocations`): the fullest that still fits first (binpack, as
   placement packs GPU shares);
3. MIG devices: those on a GPU already in use first, so idle GPUs stay whole (as `pack_shared`);
4. anything else, in node order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from agent.gpuset import GpuSelector, mask_indices
from agent.model import LinkMatrix, NodeInventory

from .candidates import Candidate, Candidates
from .model import AttrValue, Device, DeviceId
from .usage import Usage

__all__ = ["GpuMap", "OrderMemo", "prefer"]

_GPU_NAME = re.compile(r"^gpu-(\d+)$")
_MEMO_LIMIT = 10_000

OrderMemo = dict[tuple[int, int, tuple[int, ...]], tuple[GpuSelector, tuple[tuple[int, int], ...]]]
"""The order `prefer` found per (GPU selector, count, GPU masks of the groups)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuMap:
    """A node's DRA devices as model GPUs: whole GPUs by index (`whole`), MIG devices by their
    parent's index (`parent`), and the node's `selector` (NVLink-optimal GPU sets)."""

    selector: GpuSelector = field(compare=False)
    whole: Mapping[DeviceId, int]
    parent: Mapping[DeviceId, int]
    layout: tuple[LinkMatrix, tuple[int | None, ...]] | None = field(default=None, compare=False)
    """The links and NUMA nodes `selector` was made from here (None: it was given), so that
    maps with selectors of equal layouts are known to choose alike."""

    @classmethod
    def build(
        cls,
        inventory: NodeInventory,
        devices: Sequence[Device],
        selector: GpuSelector | None = None,
    ) -> GpuMap:
        """Match each device to a GPU by its `uuid` attribute, else by its `gpu-<minor>` name;
        a device with a `parentUUID` attribute is a MIG device of that GPU."""
        by_uuid = {str(g.uuid): g.index for g in inventory.gpus}
        by_minor = {g.minor: g.index for g in inventory.gpus}
        whole: dict[DeviceId, int] = {}
        parent: dict[DeviceId, int] = {}
        for dev in devices:
            driver = dev.id.driver
            parent_uuid = dev.attributes.get(f"{driver}/parentUUID")
            if isinstance(parent_uuid, str) and parent_uuid in by_uuid:
                parent[dev.id] = by_uuid[parent_uuid]
                continue
            index = _whole_index(dev, by_uuid, by_minor)
            if index is not None:
                whole[dev.id] = index
        if selector is not None:
            return cls(selector=selector, whole=whole, parent=parent)
        numa = tuple(g.numa_node for g in inventory.gpus)
        sel = GpuSelector(inventory.links, numa)
        return cls(selector=sel, whole=whole, parent=parent, layout=(inventory.links, numa))


def _whole_index(
    dev: Device, by_uuid: Mapping[str, int], by_minor: Mapping[int, int]
) -> int | None:
    uuid = dev.attributes.get(f"{dev.id.driver}/uuid")
    if isinstance(uuid, str):
        return by_uuid.get(uuid)
    match = _GPU_NAME.match(dev.name)
    return by_minor.get(int(match.group(1))) if match else None


def prefer(
    cands: Candidates,
    gpus: GpuMap | None,
    usage: Usage,
    group_by: str | None,
    memo: OrderMemo | None = None,
) -> Candidates:
    """`cands` in the order the search should try them (see the module docstring). `memo`
    keeps the order of whole GPUs per GPU selector, count and sets of GPUs to order."""
    if gpus is None or len(cands.usable) < 2:
        return cands
    if group_by is None:
        only = _only_whole(cands.usable, gpus)
        if only is not None:  # the common case: whole GPUs only, in one group
            ordered = _ordered(only, gpus, cands.need, memo)
            return Candidates(tuple(ordered), cands.need, cands.miss)
    whole, shared, mig, rest = [], [], [], []
    for cand in cands.usable:
        dev = cand.device
        if cand.consumed is not None:
            shared.append(cand)
        elif dev.id in gpus.whole:
            whole.append(cand)
        elif dev.id in gpus.parent:
            mig.append(cand)
        else:
            rest.append(cand)
    ordered = _whole_order(whole, gpus, cands.need, group_by, memo) if whole else []
    if shared:
        ordered += sorted(shared, key=lambda c: (_fullness_left(c, usage), c.device.name))
    if mig:
        busy = _busy_gpus(gpus, usage)
        ordered += sorted(
            mig, key=lambda c: (gpus.parent[c.device.id] not in busy, gpus.parent[c.device.id])
        )
    return Candidates(tuple(ordered + rest), cands.need, cands.miss)


def _whole_order(
    whole: list[Candidate], gpus: GpuMap, need: int, group_by: str | None, memo: OrderMemo | None
) -> list[Candidate]:
    groups: dict[tuple[str, AttrValue] | None, dict[int, Candidate]] = {}
    for cand in whole:
        value = cand.device.attributes.get(group_by) if group_by else None
        key = None if value is None else (type(value).__name__, value)
        groups.setdefault(key, {})[gpus.whole[cand.device.id]] = cand
    return _ordered(list(groups.values()), gpus, need, memo)


def _only_whole(usable: Sequence[Candidate], gpus: GpuMap) -> list[dict[int, Candidate]] | None:
    """The candidates by GPU index as one group when every one is a whole GPU taken whole."""
    whole = gpus.whole
    by_index = {}
    for cand in usable:
        index = whole.get(cand.device.id)
        if index is None or cand.consumed is not None:
            return None
        by_index[index] = cand
    return [by_index]


def _ordered(
    members: list[dict[int, Candidate]], gpus: GpuMap, need: int, memo: OrderMemo | None
) -> list[Candidate]:
    """The groups' candidates (by GPU index) in the order `_mask_order` gives, memoised."""
    masks = tuple(sum(1 << g for g in by_index) for by_index in members)
    memo_key = (id(gpus.selector), need, masks)
    hit = None if memo is None else memo.get(memo_key)
    if hit is not None and hit[0] is gpus.selector:
        order = hit[1]
    else:
        order = _mask_order(gpus.selector, need, masks)
        if memo is not None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[memo_key] = (gpus.selector, order)
    return [members[group][g] for group, g in order]


def _mask_order(
    selector: GpuSelector, need: int, masks: Sequence[int]
) -> tuple[tuple[int, int], ...]:
    """(group, GPU) in the order to try: groups that hold enough GPUs first, better sets first;
    within a group its best set, then its other GPUs by index."""
    ranked = []
    for group, mask in enumerate(masks):
        indices = mask_indices(mask)
        size = min(need, len(indices))
        best = selector.select_mask(mask, 0, size) or ()
        nv, pc, numa = selector.objective_of(best)
        rank = (len(indices) < need, -nv, pc, numa, min(indices))
        order = [(group, g) for g in best]
        order += [(group, g) for g in indices if g not in best]
        ranked.append((rank, order))
    return tuple(item for _rank, order in sorted(ranked, key=lambda r: r[0]) for item in order)


def _fullness_left(cand: Candidate, usage: Usage) -> Fraction:
    """The share of the device's first capacity left after this request (lower: fuller)."""
    dev = cand.device
    if not dev.capacity:
        return Fraction(0)
    name = min(dev.capacity)
    total = dev.capacity[name].value or Fraction(1)
    taken = (cand.consumed or {}).get(name, Fraction(0))
    return (usage.left(dev, name) - taken) / total


def _busy_gpus(gpus: GpuMap, usage: Usage) -> set[int]:
    busy = {g for dev, g in gpus.parent.items() if dev in usage.exclusive or dev in usage.consumed}
    busy |= {g for dev, g in gpus.whole.items() if dev in usage.consumed}
    return busy
