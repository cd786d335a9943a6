"""ResourceSlices of one node (DESIGN §14) and the writes that make the API server hold them.

One pool per node, named after the node, with `nodeName` set; its devices are split over as many
slices as the API's per-slice limit asks (128 devices, 64 when any carries a taint), named
`<node>-gpu.gputopo.io-<i>`. An Unhealthy device carries the NoSchedule taint
`gpu.gputopo.io/unhealthy`. A shared GPU (DESIGN §12) has `allowMultipleAllocations` and a request
policy on its `memory` and its `compute` (percent): a claim that does not ask one of them in
`capacity.requests` takes the equal split of it.

`plan_slices` compares what the API server holds with what it should: each slice carries the hash
of the whole pool's content in an annotation, so a slice the kubelet wiped, a changed device or a
stale slice all show, and the server's own rewriting (quantities in canonical form, a taint's
`timeAdded`) never makes a false difference. A change writes every slice of the pool again with
the pool's generation one higher, as the API asks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.dra import API_VERSION, DRIVER, UNHEALTHY_TAINT
from agent.dra.devices import COMPUTE, FULL_COMPUTE, MEMORY, DraDevice

CONTENT_ANNOTATION = f"{DRIVER}/content"
MAX_DEVICES = 128
MAX_TAINTED_DEVICES = 64
SHARE_MIN_MEMORY = "1Mi"
"""The least memory a claim may ask of a shared GPU (`capacity.requests.memory`)."""
SHARE_MIN_COMPUTE = "1"
"""The least compute (percent) a claim may ask of a shared GPU (`capacity.requests.compute`)."""

Obj = dict[str, Any]

GATED: tuple[tuple[str, str, str], ...] = (
    (
        "allowMultipleAllocations",
        "DRAConsumableCapacity",
        "each shared GPU serves one claim, whole, and a claim cannot ask a share's size",
    ),
    (
        "taints",
        "DRADeviceTaints",
        "an Unhealthy device is not tainted, and kube-scheduler may still allocate it",
    ),
)
"""A device's field, the feature gate without which the API server drops it when it stores a
slice (alpha, off, on 1.34 and 1.35; beta, on, from 1.36), and what that costs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SlicePlan:
    """The writes that bring the node's slices to the wanted content; empty when they hold it."""

    create: tuple[Obj, ...] = ()
    update: tuple[Obj, ...] = ()  # full objects with the resourceVersion they replace
    delete: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    """When the server holds the pool: what it left out of the devices written (`GATED`)."""

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def slice_name(node: str, index: int) -> str:
    return f"{node}-{DRIVER}-{index}"


def device_entry(device: DraDevice, unhealthy: bool) -> Obj:
    """One entry of a slice's `spec.devices`."""
    entry: Obj = {
        "name": device.name,
        "attributes": {k: dict(v) for k, v in sorted(device.attributes.items())},
        "capacity": {k: {"value": v} for k, v in sorted(device.capacity.items())},
    }
    if device.shared:
        entry["allowMultipleAllocations"] = True
        entry["capacity"][MEMORY]["requestPolicy"] = {
            "default": f"{device.share_memory_mib}Mi",
            "validRange": {"min": SHARE_MIN_MEMORY},
        }
        entry["capacity"][COMPUTE]["requestPolicy"] = {
            "default": str(device.share_compute_percent),
            "validRange": {"min": SHARE_MIN_COMPUTE, "max": str(FULL_COMPUTE)},
        }
    if unhealthy:
        entry["taints"] = [{"key": UNHEALTHY_TAINT, "value": "true", "effect": "NoSchedule"}]
    return entry


def _chunks(entries: Sequence[Obj]) -> list[list[Obj]]:
    size = MAX_TAINTED_DEVICES if any("taints" in e for e in entries) else MAX_DEVICES
    return [list(entries[i : i + size]) for i in range(0, len(entries), size)] or [[]]


def wanted_slices(
    node: str,
    devices: Sequence[DraDevice],
    unhealthy: Collection[str],
    *,
    generation: int,
    node_uid: str | None = None,
) -> list[Obj]:
    """The slices of the pool at `generation`; `unhealthy` names the devices to taint
    (`agent.dra.devices.unhealthy_devices`)."""
    entries = [device_entry(d, d.name in unhealthy) for d in devices]
    chunks = _chunks(entries)
    content = _content_hash(node, entries)
    out = []
    for index, chunk in enumerate(chunks):
        meta: Obj = {"name": slice_name(node, index), "annotations": {CONTENT_ANNOTATION: content}}
        if node_uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ]
        pool = {"name": node, "generation": generation, "resourceSliceCount": len(chunks)}
        spec = {"driver": DRIVER, "nodeName": node, "pool": pool, "devices": chunk}
        out.append(
            {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": meta, "spec": spec}
        )
    return out


def _content_hash(node: str, entries: Sequence[Obj]) -> str:
    text = json.dumps({"node": node, "devices": list(entries)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def plan_slices(
    node: str,
    devices: Sequence[DraDevice],
    unhealthy: Collection[str],
    existing: Sequence[Mapping[str, Any]],
    *,
    node_uid: str | None = None,
) -> SlicePlan:
    """What to write so that the node's pool is `devices`; `existing` is every slice of this
    driver on this node as the API server returned it."""
    ours = {s["metadata"]["name"]: s for s in existing if _ours(s, node)}
    generation = max((_generation(s) for s in ours.values()), default=0)
    wanted = wanted_slices(node, devices, unhealthy, generation=generation, node_uid=node_uid)
    if _holds(ours, wanted):
        return SlicePlan(dropped=_dropped(ours, wanted))
    wanted = wanted_slices(node, devices, unhealthy, generation=generation + 1, node_uid=node_uid)
    create, update = [], []
    for obj in wanted:
        old = ours.get(obj["metadata"]["name"])
        if old is None:
            create.append(obj)
        else:
            obj["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
            update.append(obj)
    names = {o["metadata"]["name"] for o in wanted}
    stale = tuple(sorted(n for n in ours if n not in names))
    return SlicePlan(create=tuple(create), update=tuple(update), delete=stale)


def _dropped(ours: Mapping[str, Mapping[str, Any]], wanted: Sequence[Obj]) -> tuple[str, ...]:
    """For each `GATED` field a wanted device sets that its stored twin lacks, one sentence."""
    found: list[str] = []
    for field, gate, cost in GATED:
        for obj in wanted:
            stored = ours[obj["metadata"]["name"]].get("spec") or {}
            held = {d.get("name"): d for d in stored.get("devices") or ()}
            lost = [
                d["name"]
                for d in obj["spec"]["devices"]
                if field in d and field not in held.get(d["name"], {})
            ]
            if lost:
                found.append(
                    f"the API server dropped {field} from ResourceSlice {obj['metadata']['name']} "
                    f"(devices {', '.join(lost)}): its {gate} feature gate is off; {cost}"
                )
                break
    return tuple(found)


def _ours(obj: Mapping[str, Any], node: str) -> bool:
    spec = obj.get("spec") or {}
    return bool(spec.get("driver") == DRIVER and spec.get("nodeName") == node)


def _generation(obj: Mapping[str, Any]) -> int:
    return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)


def _holds(ours: Mapping[str, Mapping[str, Any]], wanted: Sequence[Obj]) -> bool:
    if set(ours) != {o["metadata"]["name"] for o in wanted}:
        return False
    for obj in wanted:
        held = ours[obj["metadata"]["name"]]
        annotations = held["metadata"].get("annotations") or {}
        if (
            annotations.get(CONTENT_ANNOTATION)
            != obj["metadata"]["annotations"][CONTENT_ANNOTATION]
        ):
            return False
    return True
