"""One pod as the scheduler runtime tracks it (`PodInfo`), read once when it arrives from the API.

`read_pod` turns the pod's JSON into its key, its placement request (or the problem that stops
one being made) and the flags the loop tests; it is pure, so intake calls it before taking the
cache lock. Given the pod as last read, it keeps that request when nothing placement reads has
changed (the spec apart from `nodeName`, the labels): the update that confirms a binding costs a
dict comparison, not a second reading of every container. The cache then adds what only it
knows: whether this scheduler assumed the pod on a node before the API reported the binding, and
the devices it assigned there.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent.objkey import DEFAULT_NAMESPACE, ObjectKey, object_key
from agent.shares import GPUS_ANNOTATION, ShareRequestError, decode_gpus
from scheduler.claims.charge import ClaimShare
from scheduler.placement import Assignment, PodRequest
from scheduler.runtime.cluster.podspec import pod_request

__all__ = ["PodInfo", "admission_rejection", "parse_time", "read_pod"]

Obj = Mapping[str, Any]
_TERMINAL = ("Succeeded", "Failed")


def parse_time(text: object) -> float:
    """An RFC 3339 timestamp as epoch seconds (0.0 when absent or unreadable)."""
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(slots=True, kw_only=True)
class PodInfo:
    """One pod. `node` is the bound node, or the one this scheduler assumed it on (`assumed`);
    `assignment` the devices this scheduler chose there. `group_key`: the PodGroup it joins.
    `terminating`: deleted with a grace period (it keeps its room until it is gone).
    `share_gpus`: its `gputopo.io/gpus` annotation (share container -> GPU UUID; DESIGN §12).
    A waiting pod asking an extended resource a DeviceClass maps (KEP-5004) is read two ways,
    one of them the cache's entry: `dra_form`, set on the pod as the device plugin's nodes read
    it, is the pod with the claim made for it; `plugin_form`, set on that one, leads back
    (`scheduler.runtime.claims.placing.ClaimCharges.first_form`)."""

    key: ObjectKey
    uid: str
    namespace: str
    name: str
    obj: Obj
    request: PodRequest
    error: str | None
    node: str | None
    assumed: bool = False
    assignment: Assignment | None = None
    ours: bool
    gated: bool
    terminal: bool
    terminating: bool = False  # `deletionTimestamp` set: still takes room, never a victim
    group: str | None
    group_key: ObjectKey | None
    created: float
    share_gpus: Mapping[str, str] = field(default_factory=dict)
    claim_shares: tuple[ClaimShare, ...] = ()
    dra_form: PodInfo | None = field(default=None, compare=False, repr=False)
    plugin_form: PodInfo | None = field(default=None, compare=False, repr=False)

    @property
    def pending(self) -> bool:
        """Ours, not bound or assumed, not finished: waiting for this scheduler."""
        return self.ours and self.node is None and not self.terminal

    @property
    def counted(self) -> bool:
        """Takes room on `node`."""
        return self.node is not None and not self.terminal


def placement_inputs_equal(old: Obj, new: Obj) -> bool:
    """Do `old` and `new` agree on everything `pod_request` reads (spec but `nodeName`, labels)?"""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if old_meta.get("labels") != new_meta.get("labels"):
        return False
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if len(old_spec) == len(new_spec) and old_spec.get("nodeName") == new_spec.get("nodeName"):
        return bool(old_spec == new_spec)
    return {k: v for k, v in old_spec.items() if k != "nodeName"} == {
        k: v for k, v in new_spec.items() if k != "nodeName"
    }


def _request(
    obj: Obj, key: ObjectKey, uid: str, previous: PodInfo | None, memo: RequestMemo | None
) -> tuple[PodRequest, str | None]:
    """The pod's request and the error that stops one being made; `previous`'s when it is the
    same pod (key and uid) and nothing placement reads changed."""
    if (
        previous is not None
        and previous.key == key
        and previous.uid == uid
        and placement_inputs_equal(previous.obj, obj)
    ):
        return previous.request, previous.error
    labels, spec = _inputs(obj)
    known = memo.find(labels, spec) if memo is not None else None
    if known is not None:
        return _with_key(known, key), None
    try:
        request = pod_request(obj, key)
    except ValueError as exc:
        return PodRequest(key=key), str(exc)
    if memo is not None:
        memo.keep(labels, spec, request)
    return request, None


# PodRequest's slots (member descriptors): each field but `key` read and set straight, past the
# frozen dataclass's `__setattr__`.
_SLOTS = vars(PodRequest)
_COPIED = tuple(
    (_SLOTS[f.name].__get__, _SLOTS[f.name].__set__)
    for f in dataclasses.fields(PodRequest)
    if f.name != "key"
)
_SET_KEY = _SLOTS["key"].__set__


def _with_key(request: PodRequest, key: ObjectKey) -> PodRequest:
    """`request` under another pod's key: every slot copied as it is (`__post_init__` checked
    and derived them from the same inputs; none depends on the key), a third of the cost of
    `dataclasses.replace` (a start reads thousands of pods of one template)."""
    out = object.__new__(PodRequest)
    for get, put in _COPIED:
        put(out, get(request))
    _SET_KEY(out, key)
    return out


class RequestMemo:
    """Requests read lately, by what `pod_request` reads (`_inputs`): the pods of one Job or
    ReplicaSet share a template, so a list of thousands of pods reads each template once (a
    start-up reads every pod). The last `recent` templates are compared by value first (a
    list brings a template's pods together, and that costs less than making the text key);
    then the text of the inputs is looked up. Owned by the cache; at most `size` templates,
    then it starts again."""

    def __init__(self, size: int = 1024, recent: int = 4) -> None:
        self.requests: dict[str, PodRequest] = {}
        self._size, self._recent_size = size, recent
        self._recent: list[tuple[object, Obj, PodRequest]] = []  # newest last

    def find(self, labels: object, spec: Obj) -> PodRequest | None:
        for seen_labels, seen_spec, request in reversed(self._recent):
            if seen_spec == spec and seen_labels == labels:
                return request
        known = self.requests.get(_inputs_text(labels, spec))
        if known is not None:
            self._remember(labels, spec, known)
        return known

    def keep(self, labels: object, spec: Obj, request: PodRequest) -> None:
        if len(self.requests) >= self._size:
            self.requests.clear()
        self.requests[_inputs_text(labels, spec)] = request
        self._remember(labels, spec, request)

    def _remember(self, labels: object, spec: Obj, request: PodRequest) -> None:
        self._recent.append((labels, spec, request))
        if len(self._recent) > self._recent_size:
            del self._recent[0]


_NOT_READ = frozenset(("nodeName", "volumes"))
"""Spec fields `pod_request` never reads (volumes: `volumes.VolumeCheck` reads the pod itself)."""
_CONTAINER_LISTS = ("containers", "initContainers")


def _inputs(obj: Obj) -> tuple[object, Obj]:
    """What `pod_request` reads of `obj`: the namespace and labels, and the spec but `nodeName`,
    the volumes and each container's `volumeMounts`. A real API server gives every pod a token
    volume of its own (`kube-api-access-<random>`), so with those the pods of one template never
    shared a reading."""
    spec = obj.get("spec") or {}
    if "nodeName" in spec or "volumes" in spec:
        spec = {
            k: _unmounted(v) if k in _CONTAINER_LISTS else v
            for k, v in spec.items()
            if k not in _NOT_READ
        }
    meta = obj.get("metadata") or {}
    return (meta.get("namespace"), meta.get("labels")), spec


def _unmounted(containers: object) -> object:
    """`containers` without their `volumeMounts` (anything malformed as it is: reading the pod
    names it)."""
    if not isinstance(containers, list):
        return containers
    return [
        {k: v for k, v in c.items() if k != "volumeMounts"}
        if isinstance(c, Mapping) and "volumeMounts" in c
        else c
        for c in containers
    ]


def _inputs_text(labels: object, spec: Obj) -> str:
    """`_inputs` as text: equal text means equal inputs (a different key order only misses)."""
    return json.dumps([labels, spec], separators=(",", ":"), default=str)


def read_pod(
    obj: Obj,
    scheduler_name: str,
    previous: PodInfo | None = None,
    memo: RequestMemo | None = None,
) -> PodInfo:
    """The pod as the API object says (bound or not; nothing assumed). Never raises: a malformed
    pod gets an empty request and `error` says what is wrong. `previous`: the same pod as last
    read, whose request is kept when nothing placement reads changed; `memo`: requests of pods
    read before, reused for a pod of the same template."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
    name = str(meta.get("name") or "")
    key = object_key(namespace, name)
    uid = str(meta.get("uid") or "")
    request, error = _request(obj, key, uid, previous, memo)
    node = spec.get("nodeName")
    group = request.pod_group
    return PodInfo(
        key=key,
        uid=uid,
        namespace=namespace,
        name=name,
        obj=obj,
        request=request,
        error=error,
        node=str(node) if node else None,
        ours=spec.get("schedulerName") == scheduler_name,
        gated=bool(spec.get("schedulingGates")),
        terminal=status.get("phase") in _TERMINAL,
        terminating=bool(meta.get("deletionTimestamp")),
        group=group,
        group_key=None if group is None else object_key(namespace, group),
        created=parse_time(meta.get("creationTimestamp")),
        share_gpus=_share_gpus(meta),
    )


def _share_gpus(meta: Obj) -> dict[str, str]:
    """The pod's share annotation; a malformed one reads as absent (its shares then count as
    equal splits, as for a pod another scheduler placed)."""
    text = (meta.get("annotations") or {}).get(GPUS_ANNOTATION)
    if not text:
        return {}
    try:
        return dict(decode_gpus(str(text)))
    except ShareRequestError:
        return {}


def admission_rejection(obj: Obj) -> str | None:
    """The kubelet's reason when it refused a bound pod at admission (`UnexpectedAdmissionError`
    from its device manager, `OutOf<resource>` from its resource check), else None. Seen when
    another scheduler bound a pod to the same free GPUs at the same moment."""
    status = obj.get("status") or {}
    reason = status.get("reason")
    if status.get("phase") != "Failed" or not isinstance(reason, str):
        return None
    if reason == "UnexpectedAdmissionError" or reason.startswith("OutOf"):
        return reason
    return None
