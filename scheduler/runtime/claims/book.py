"""The claim book: DeviceClasses, ResourceSlices and ResourceClaims as read at intake, what is
allocated (`usage`, from every claim's `status.allocation`, whoever allocated it, and this
scheduler's decisions not yet written), and each node as claims see it (`node`).

A malformed object is logged once, naming the object and the field, and left out (a claim
that does not parse keeps its problem, which its pods show). Slices are indexed as they arrive:
a node's own (`nodeName`) under that node, the others (`allNodes`, `nodeSelector`) apart, so a
node's view reads only those two and a slice event makes only the views it may change stale.
A node's `ClaimNode` is kept while its slices, labels, inventory (NRT) and placement state are
the same objects, so the allocator's verdicts per node object stay valid; a new one is built
when any of them changes, its GPU map with the node's own `GpuSelector` (placement's, one per
layout). Not thread-safe: callers hold `cache.lock`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any

from agent.model import NodeInventory
from scheduler.claims.allocator import ClaimAllocator
from scheduler.claims.charge import ClaimCharge, claim_charge
from scheduler.claims.decision import ClaimNode, PodClaims, PodDecision
from scheduler.claims.errors import SpecError
from scheduler.claims.extended import CLAIM_ANNOTATION, ExtendedAsk, mapped_names
from scheduler.claims.model import (
    Allocation,
    ClaimKey,
    Device,
    DeviceClass,
    DeviceId,
    ResourceClaim,
    ResourceSlice,
)
from scheduler.claims.order import GpuMap
from scheduler.claims.parse import (
    parse_claim,
    parse_device_class,
    parse_slice,
    parse_taint_rule,
)
from scheduler.claims.slices import node_devices, serves
from scheduler.claims.taintrules import TaintRule
from scheduler.claims.usage import Usage
from scheduler.placement import NodeState, Scoring
from scheduler.runtime.claims.podrefs import claim_refs
from scheduler.runtime.cluster.groups import GroupInfo

__all__ = ["CLAIMS", "CLASSES", "KINDS", "RULES", "SLICES", "ClaimBook", "made_key"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
CLASSES, SLICES, CLAIMS = "deviceclasses", "resourceslices", "resourceclaims"
RULES = "devicetaintrules"
"""DeviceTaintRules: watched where the server serves them (resource.k8s.io/v1, Kubernetes 1.37)."""
KINDS = (CLASSES, SLICES, CLAIMS, RULES)
MAX_RESERVED = 256
"""The most consumers a claim's `status.reservedFor` holds (resource.k8s.io/v1)."""
"""The intake's kind names of resource.k8s.io/v1 objects (`scheduler.kubeapi.resourceclaims`)."""


def _key_of(obj: Obj) -> ClaimKey:
    meta = obj.get("metadata") or {}
    return ClaimKey(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def _meta_of(obj: Obj) -> tuple[bool, tuple[str, ...]]:
    """Whether the claim is being deleted, and the UIDs of its owners."""
    meta = obj.get("metadata") or {}
    owners = tuple(str(o.get("uid") or "") for o in meta.get("ownerReferences") or ())
    return bool(meta.get("deletionTimestamp")), owners


def made_key(namespace: str, pod: str) -> ClaimKey:
    """The claim a waiting pod's extended resources need, before its bind creates it (not a
    valid name: never one in the API)."""
    return ClaimKey(namespace, f"<extended-resources of pod {pod}>")


def _made_for(obj: Obj) -> tuple[str, str] | None:
    """The UID and name of the pod a claim was made for by a scheduler (KEP-5004: annotated,
    the pod its controller), or None."""
    meta = obj.get("metadata") or {}
    if (meta.get("annotations") or {}).get(CLAIM_ANNOTATION) != "true":
        return None
    for owner in meta.get("ownerReferences") or ():
        if owner.get("kind") == "Pod" and owner.get("controller") is True:
            return str(owner.get("uid") or ""), str(owner.get("name") or "")
    return None


def _name_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class ClaimBook:
    """resource.k8s.io/v1 as the scheduler knows it, and the allocator deciding on it."""

    def __init__(self, scoring: Scoring | None = None) -> None:
        self._scoring = scoring
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.rules: dict[str, TaintRule] = {}  # DeviceTaintRules by name
        self._rules: tuple[TaintRule, ...] = ()  # those that taint, in name order
        self.claims: dict[ClaimKey, ResourceClaim] = {}
        self.problems: dict[ClaimKey, str] = {}
        self._meta: dict[ClaimKey, tuple[bool, tuple[str, ...]]] = {}  # deleting, owner UIDs
        self.allocator = ClaimAllocator({}, scoring=scoring)
        self.trial = self._trial()
        self._assumed: dict[ClaimKey, Allocation] = {}
        self._usage: Usage | None = None
        self._slices_version = 0
        self._dropped = 0  # `views_version`
        self._local: dict[str, dict[str, ResourceSlice]] = {}  # node -> its slices by name
        self._shared: dict[str, ResourceSlice] = {}  # allNodes / nodeSelector slices by name
        self._epochs: dict[str, int] = {}  # node -> changes of the slices that serve it
        self._shared_epoch = 0
        self._nodes: dict[str, tuple[tuple[int, int], tuple[object, ...], ClaimNode]] = {}
        self._by_id: tuple[int, dict[DeviceId, Device]] | None = None
        self.extended: dict[str, DeviceClass] = {}  # extended-resource names classes map
        self._made: dict[ClaimKey, _Made] = {}
        self._made_by_pod: dict[str, set[ClaimKey]] = {}  # pod UID -> claims made for it, in API
        self._made_owner: dict[ClaimKey, str] = {}
        self._stale: set[ClaimKey] = set()  # made claims of waiting pods, to delete (`stale`)

    # -- intake ----------------------------------------------------------------------------
    def replace(self, kind: str, items: Iterable[Obj]) -> None:
        """A full list of `kind`: what is not in it is gone."""
        items = list(items)
        if kind == CLAIMS:
            gone: set[object] = set(self.claims) | set(self.problems)
            gone -= {_key_of(o) for o in items}
        else:
            by_kind: dict[str, Mapping[str, object]] = {
                CLASSES: self.classes, SLICES: self.slices, RULES: self.rules
            }  # fmt: skip
            gone = set(by_kind[kind])
            gone -= {_name_of(o) for o in items}
        for obj in items:
            self.apply(kind, "ADDED", obj)
        for key in gone:
            if isinstance(key, ClaimKey):
                stub: Obj = {"metadata": {"namespace": key.namespace, "name": key.name}}
            else:
                stub = {"metadata": {"name": key}}
            self.apply(kind, "DELETED", stub)

    def apply(self, kind: str, etype: str, obj: Obj) -> bool:
        """One object of `kind` added, changed or deleted; True when allocation may see more
        room or new devices (its waiting pods are worth another try)."""
        if kind == CLASSES:
            return self._apply(self.classes, _name_of(obj), etype, obj, parse_device_class)
        if kind == SLICES:
            name = _name_of(obj)
            old = self.slices.get(name)
            self._slices_version += 1
            changed = self._apply(self.slices, name, etype, obj, parse_slice)
            self._index(name, old, self.slices.get(name))
            return changed
        if kind == CLAIMS:
            return self._on_claim(etype, obj)
        if kind == RULES:
            return self._on_rule(etype, obj)
        return False

    def _on_rule(self, etype: str, obj: Obj) -> bool:
        """A DeviceTaintRule changed: every node's view is built again with the rules' taints
        (rules change seldom; a view of unchanged devices is kept as the same object)."""
        before = self._rules
        self._apply(self.rules, _name_of(obj), etype, obj, parse_taint_rule)
        self._rules = tuple(r for _n, r in sorted(self.rules.items()) if r.taint is not None)
        if self._rules == before:
            return False
        self._shared_epoch += 1
        self._slices_version += 1
        return True

    def _apply(
        self,
        book: dict[str, Any],
        name: str,
        etype: str,
        obj: Obj,
        parse: Callable[[object], Any],
    ) -> bool:
        if etype == "DELETED":
            book.pop(name, None)
        else:
            try:
                book[name] = parse(obj)
            except SpecError as exc:
                log.warning("ignoring %s", exc, extra={"resource": name})
                book.pop(name, None)
        if book is self.classes:
            self.extended = mapped_names(self.classes.values())
            self.allocator = ClaimAllocator(dict(self.classes), scoring=self._scoring)
            self.trial = self._trial()
        return True

    def _trial(self) -> ClaimAllocator:
        """An allocator for trials on nodes emptied of every claim (`ClaimCharges.claimed`),
        alike the allocator (its selectors, reads and nodes' likenesses shared): its verdicts
        follow an empty `Usage`, where the allocator's follow the one in use; deciding both on
        one would class every node in use again at each turn (76 ms a refused pod at 5,000
        full nodes), and reading each node's likeness apart cost the first trial 0.3 s there."""
        return ClaimAllocator(dict(self.classes), scoring=self._scoring, alike=self.allocator)

    def _index(self, name: str, old: ResourceSlice | None, new: ResourceSlice | None) -> None:
        """Move slice `name` from `old`'s bucket to `new`'s (a node's own, or the shared one)
        and count a change for the views each may serve: only those are built again (every
        view for an `allNodes` slice; for a `nodeSelector` one, the nodes it selects by the
        labels their views were built with)."""
        for one, add in ((old, False), (new, True)):
            if one is None:
                continue
            if one.node_name is not None:
                bucket = self._local.setdefault(one.node_name, {})
                self._epochs[one.node_name] = self._epochs.get(one.node_name, 0) + 1
            else:
                bucket = self._shared
                self._touch_served(one)
            if add:
                bucket[name] = one
            else:
                bucket.pop(name, None)
        if old is not None and old.node_name is not None and not self._local[old.node_name]:
            del self._local[old.node_name]

    def _touch_served(self, shared: ResourceSlice) -> None:
        if shared.all_nodes:
            self._shared_epoch += 1
            return
        for node, (_, inputs, _) in self._nodes.items():
            labels = inputs[0]
            if isinstance(labels, Mapping) and serves(shared, node, labels):
                self._epochs[node] = self._epochs.get(node, 0) + 1

    def _on_claim(self, etype: str, obj: Obj) -> bool:
        key = _key_of(obj)
        old = self.claims.pop(key, None)
        self.problems.pop(key, None)
        new = None
        if etype != "DELETED":
            try:
                new = parse_claim(obj)
            except SpecError as exc:
                log.warning("ignoring %s", exc, extra={"resource": str(key)})
                self.problems[key] = str(exc)
        self._meta.pop(key, None)
        made_for = None if new is None else _made_for(obj)
        self._index_made(key, None if made_for is None else made_for[0])
        assumed = None
        if new is not None:
            self.claims[key] = new
            self._meta[key] = _meta_of(obj)
            if new.allocation is not None:
                assumed = self._assumed.pop(key, None)
                if assumed is None and made_for is not None:  # its bind not yet told (`created`)
                    assumed = self._assumed.pop(made_key(key.namespace, made_for[1]), None)
        before = None if old is None else old.allocation
        after = None if new is None else new.allocation
        if before != after and not _as_assumed(before, assumed, after):
            self._usage = None
        return new is None or before != after or old is None

    # -- decisions -------------------------------------------------------------------------
    def usage(self) -> Usage:
        """Every allocation: the claims' own and this scheduler's not yet seen written."""
        if self._usage is None:
            allocated = [c.allocation for c in self.claims.values() if c.allocation is not None]
            self._usage = Usage.of([*allocated, *self._assumed.values()])
        return self._usage

    def pod_claims(self, key: str, pod: Obj, group: GroupInfo | None = None) -> PodClaims | str:
        """The pod's claims as the allocator takes them (with this scheduler's allocations not
        yet written), or why the pod waits for them. `group`: the pod's PodGroup, whose claims
        the pod uses as the group's consumer."""
        refs = claim_refs(pod, () if group is None else group.claims)
        if refs.waiting is not None:
            return refs.waiting
        claims = []
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        stale = self._made_by_pod.get(uid) if any(r in self._made for r in refs.keys) else None
        if stale:
            self._stale |= stale
            return (
                f"waiting for ResourceClaim {min(stale)}, made for its extended resources by a "
                "bind that did not finish, to be deleted"
            )
        for ref in refs.keys:
            problem = self.problems.get(ref)
            if problem is not None:
                return f"ResourceClaim {ref} cannot be used: {problem}"
            claim = self.claims.get(ref)
            if claim is None and ref in self._made:
                claim = self._made[ref].claim
            if claim is None:
                return f'resourceclaim "{ref}" not found'
            consumer = uid if group is None or ref not in refs.for_group else group.uid
            why = self._unusable(claim, consumer, ref in refs.made)
            if why is not None:
                return why
            assumed = self._assumed.get(ref)
            claims.append(claim if assumed is None else replace(claim, allocation=assumed))
        return PodClaims(key=key, claims=tuple(claims))

    # -- claims made for extended resources (KEP-5004) ----------------------------------------
    def make(self, key: ClaimKey, body: dict[str, Any], ask: ExtendedAsk, pod: Obj) -> None:
        """The claim a pod's extended resources need, before it exists: read as the pod's claim
        `key` until its bind creates it (`made`); `pod` as the API has it."""
        known = self._made.get(key)
        if known is None or known.body != body:
            self._made[key] = _Made(claim=parse_claim(body), body=body, ask=ask, pod=pod)
        elif known.pod is not pod:
            self._made[key] = replace(known, pod=pod)

    def unmake(self, key: ClaimKey) -> None:
        self._made.pop(key, None)
        if self._assumed.pop(key, None) is not None:
            self._usage = None

    def made(self, key: ClaimKey) -> _Made | None:
        """The claim to create for `key`, when `key` is one not created yet."""
        return self._made.get(key)

    def created(self, made: ClaimKey, key: ClaimKey) -> None:
        """The bind created claim `key` for `made` and allocated it: its allocation counts under
        `key` until the claim is read allocated (unless it is already). Told by the bind and by
        the bound pod's status, whichever comes first; the second finds nothing to move."""
        allocation = self._assumed.pop(made, None)
        self._made.pop(made, None)
        if allocation is None:
            return  # nothing assumed, or moved when the claim was read allocated (`_on_claim`)
        claim = self.claims.get(key)
        if claim is None or claim.allocation is None:
            self._assumed[key] = allocation  # the same devices, under the claim's own name
        else:
            self._usage = None  # read allocated already: counted from the claim and assumed

    def _index_made(self, key: ClaimKey, owner: str | None) -> None:
        """Claim `key` as made for pod `owner`'s extended resources (None: not, or gone)."""
        old = self._made_owner.pop(key, None)
        if old is not None:
            self._made_by_pod[old].discard(key)
            if not self._made_by_pod[old]:
                del self._made_by_pod[old]
        if owner is not None:
            self._made_owner[key] = owner
            self._made_by_pod.setdefault(owner, set()).add(key)

    @property
    def has_made(self) -> bool:
        return bool(self._made)

    @property
    def has_stale(self) -> bool:
        return bool(self._stale)

    def stale(self) -> set[ClaimKey]:
        """The claims made for waiting pods' extended resources by earlier binds, which kept
        them from a new claim (`pod_claims`): to delete, as kube-scheduler deletes them. Each
        once per refusal."""
        stale, self._stale = self._stale, set()
        return stale

    def _unusable(self, claim: ResourceClaim, consumer: str, made: bool) -> str | None:
        """Why `consumer` (the pod's UID, or its PodGroup's for a group claim) may not use
        `claim` now, as kube-scheduler refuses it (None: it may)."""
        deleting, owners = self._meta.get(claim.key, (False, ()))
        if deleting:
            return f'resourceclaim "{claim.key}" is being deleted'
        if made and consumer not in owners:
            return f"ResourceClaim {claim.key} was not created for the pod (not its owner)"
        if len(claim.reserved_for) >= MAX_RESERVED and consumer not in claim.reserved_for:
            return f"resourceclaim {claim.key} is reserved for {MAX_RESERVED} consumers already"
        return None

    def node(
        self,
        name: str,
        labels: Mapping[str, str],
        inventory: NodeInventory | None,
        state: NodeState | None,
    ) -> ClaimNode:
        """`name` as claims see it (the same object while nothing it is built from changed):
        built from the node's own slices and the shared ones, again only when one of those,
        its labels, inventory or state changed."""
        known = self._nodes.get(name)
        inputs = (labels, inventory, state)
        epoch = (self._epochs.get(name, 0), self._shared_epoch)
        if known is not None and known[0] == epoch and _same(known[1], inputs):
            return known[2]
        slices = [*self._local.get(name, {}).values(), *self._shared.values()]
        devices = node_devices(slices, name, labels, self._rules)
        if (
            known is not None
            and _same(known[1][1:], inputs[1:])
            and known[2].devices == devices
            and known[2].labels == labels  # what a claim's nodeSelector is matched by
        ):
            self._nodes[name] = (epoch, inputs, known[2])
            return known[2]
        gpus = None
        if inventory is not None:  # the node's own selector, as placement's: one per layout
            fits = state is not None and len(state.gpu_numa) == len(inventory.gpus)
            selector = state.selector if fits and state is not None else None
            gpus = GpuMap.build(inventory, devices.devices, selector=selector)
        view = ClaimNode(name=name, devices=devices, gpus=gpus, state=state, labels=labels)
        self._nodes[name] = (epoch, inputs, view)
        return view

    def drop_node(self, name: str) -> None:
        self._nodes.pop(name, None)
        self._dropped += 1

    @property
    def views_version(self) -> tuple[int, int]:
        """Changes whenever a slice changes or a node's view is dropped: while it stays (and the
        labels, inventories and states `node` is given stay), `node` gives the same objects."""
        return self._slices_version, self._dropped

    def charge(self, pod: Obj) -> ClaimCharge:
        """What the pod's allocated claims hold (`scheduler.claims.charge`): whole GPUs and
        shares, each claim once, with this scheduler's allocations not yet written."""
        allocations: list[Allocation] = []
        for ref in dict.fromkeys(claim_refs(pod).keys):
            allocation = self._assumed.get(ref)
            claim = self.claims.get(ref)
            if allocation is None and claim is not None:
                allocation = claim.allocation
            if allocation is not None:
                allocations.append(allocation)
        return claim_charge(allocations, self._devices())

    def freed_by(self, leaving: AbstractSet[str], alive: AbstractSet[str]) -> set[ClaimKey]:
        """The allocated claims every consumer of which is in `leaving` or not in `alive`
        (pod UIDs): the resourceclaim controller deallocates them once those pods are gone."""
        return {
            key
            for key, claim in self.claims.items()
            if claim.allocation is not None
            and claim.reserved_for
            and all(uid in leaving or uid not in alive for uid in claim.reserved_for)
        }

    def usage_without(self, freed: AbstractSet[ClaimKey]) -> Usage:
        """`usage` as it will be once the claims `freed` are deallocated."""
        if not freed:
            return self.usage()
        kept = [c.allocation for k, c in self.claims.items() if c.allocation and k not in freed]
        return Usage.of([*kept, *self._assumed.values()])

    def decision_charge(self, decision: PodDecision) -> ClaimCharge:
        """What the claims of `decision` hold once it is made (those allocated before too)."""
        return claim_charge([made.allocation for made in decision.claims], self._devices())

    def _devices(self) -> Mapping[DeviceId, Device]:
        """Every device of every slice by its ID (built again when slices change)."""
        if self._by_id is None or self._by_id[0] != self._slices_version:
            found = {d.id: d for s in self.slices.values() for d in s.devices}
            self._by_id = (self._slices_version, found)
        return self._by_id[1]

    def assume(self, decision: PodDecision) -> None:
        """The claims `decision` allocates count as allocated until their status says so."""
        for made in decision.claims:
            if made.new:
                self._assumed[made.claim.key] = made.allocation
                self.usage().add(made.allocation.devices)

    def forget(self, decision: PodDecision) -> None:
        """The bind of `decision` failed: what it allocated is free again (unless written)."""
        for made in decision.claims:
            if made.new and self._assumed.pop(made.claim.key, None) is not None:
                self._usage = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Made:
    """A claim for a pod's extended resources, not created yet: as read, as it will be created,
    the ask it holds, and the pod as the API has it."""

    claim: ResourceClaim
    body: dict[str, Any]
    ask: ExtendedAsk
    pod: Obj


def _as_assumed(
    before: Allocation | None, assumed: Allocation | None, after: Allocation | None
) -> bool:
    """Whether a claim read allocated now holds what this scheduler assumed it would (its own
    bind's write arriving): `usage` counted those devices already, and stays as it is."""
    return (
        before is None
        and assumed is not None
        and after is not None
        and assumed.devices == after.devices
    )


def _same(old: tuple[object, ...], new: tuple[object, ...]) -> bool:
    return all(a is b for a, b in zip(old, new, strict=True))
