"""What a gang's PodGroup status says, and the bookkeeping of members lost after they were bound.

Pure: no API calls, no clock (times come in as RFC 3339 stamps). `GangTracker` (`gangs`) owns one
`LostMembers` per group, feeds it every member change, and writes `group_status(...)`.

A member *holds its place* while it is bound (or assumed) and not Failed; a Succeeded member keeps
it (its work is done). A member seen bound and then deleted, or turned Failed, is *lost*: its node
was deleted (PodGC marks the pod Failed, then deletes it), shut down (the kubelet marks it
Failed), drained, or the pod failed. Why comes from the pod itself: its `DisruptionTarget`
condition (`DeletionByPodGC`, `TerminationByKubelet`, `EvictionByEvictionAPI`, ...), else its
`status.reason` (`Evicted`, ...), else `PodFailed` / `PodDeleted`.

While losses leave fewer than `minMember` members bound, the group's phase is `Unknown` (the
upstream meaning: part of the gang runs, the rest waits for its controller to recover it) and the
condition `MembersLost` is True, with the count and the cause; the replacements are placed as one
unit, as a gang's first placement is. Once `minMember` are bound again the condition turns False
with reason `MembersReplaced`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.objkey import ObjectKey
from scheduler.runtime.cluster.cache import GroupInfo
from scheduler.runtime.cluster.podinfo import PodInfo

CONDITION_LOST = "MembersLost"
REASON_REPLACED = "MembersReplaced"
REASON_MIXED = "MultipleCauses"
PHASE_UNKNOWN = "Unknown"
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_,:]*$")


def phase_of(info: PodInfo) -> str:
    return str((info.obj.get("status") or {}).get("phase") or "")


def holds_place(info: PodInfo) -> bool:
    """Bound or assumed on a node, and not Failed (a Succeeded member keeps its place)."""
    return info.node is not None and phase_of(info) != "Failed"


def bound_count(members: Sequence[PodInfo]) -> int:
    """Members bound (seen bound through the API, not only assumed) that hold their place."""
    return sum(1 for m in members if holds_place(m) and not m.assumed)


@dataclass(frozen=True, slots=True, kw_only=True)
class Loss:
    """One member lost after it was bound: where it was and why (`cause`: a CamelCase reason)."""

    key: ObjectKey
    uid: str
    node: str
    cause: str
    detail: str

    def describe(self) -> str:
        return f"{self.key} on node {self.node} ({self.cause}: {self.detail})"


def loss_cause(obj: Mapping[str, Any], deleted: bool) -> tuple[str, str]:
    """(reason, message) for a lost member, from what the pod says about itself."""
    status = obj.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            reason = str(condition.get("reason") or "")
            if _IDENTIFIER.match(reason):
                return reason, str(condition.get("message") or "disrupted")
    if status.get("phase") == "Failed":
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "the pod failed")
        return (reason if _IDENTIFIER.match(reason) else "PodFailed"), message
    if deleted:
        return "PodDeleted", "the pod was deleted"
    return "PodLost", "the pod no longer holds its place"


@dataclass(slots=True)
class LostMembers:
    """Members seen bound (`holders`, by uid) and those lost since the gang last had `minMember`
    bound (`lost`, by uid). `since`: when the condition last changed status; `replaced`: the
    members the last recovery replaced (for the False condition)."""

    holders: set[str] = field(default_factory=set)
    lost: dict[str, Loss] = field(default_factory=dict)
    since: str = ""
    replaced: tuple[ObjectKey, ...] = ()

    def observe(self, info: PodInfo, deleted: bool) -> Loss | None:
        """A member changed (`deleted`: it is gone); returns its `Loss` when it was just lost."""
        if not deleted and holds_place(info) and not info.assumed and phase_of(info) != "Succeeded":
            self.holders.add(info.uid)
            return None
        if info.uid not in self.holders:
            return None
        self.holders.discard(info.uid)
        if phase_of(info) == "Succeeded" or info.node is None:
            return None
        cause, detail = loss_cause(info.obj, deleted)
        loss = Loss(key=info.key, uid=info.uid, node=info.node, cause=cause, detail=detail)
        return loss

    def record(self, loss: Loss, stamp: str) -> None:
        if not self.lost:
            self.since = stamp
        self.lost[loss.uid] = loss

    def settle(self, bound: int, min_member: int, stamp: str) -> tuple[ObjectKey, ...]:
        """When `minMember` are bound again, forget the losses; returns who was replaced."""
        if not self.lost or bound < min_member:
            return ()
        self.replaced = tuple(sorted(loss.key for loss in self.lost.values()))
        self.lost.clear()
        self.since = stamp
        return self.replaced

    def message(self, bound: int, min_member: int) -> str:
        losses = sorted(self.lost.values(), key=lambda loss: loss.key)
        text = (
            f"{len(losses)} of {bound + len(losses)} bound members lost: "
            + "; ".join(loss.describe() for loss in losses)
            + f". {bound} bound, minMember {min_member}"
        )
        if bound < min_member:
            short = min_member - bound
            pods = "pod exists" if short == 1 else "pods exist"
            text += f": the missing members are placed together once {short} replacement {pods}"
        return text

    def condition(self, bound: int, min_member: int) -> dict[str, Any] | None:
        """The `MembersLost` condition, or None when no member was ever lost."""
        if self.lost:
            causes = sorted({loss.cause for loss in self.lost.values()})
            reason = causes[0] if len(causes) == 1 else REASON_MIXED
            return _condition("True", reason, self.message(bound, min_member), self.since)
        if self.replaced:
            return _condition(
                "False", REASON_REPLACED, self.replaced_message(min_member), self.since
            )
        return None

    def replaced_message(self, min_member: int) -> str:
        return (
            f"lost members replaced: {', '.join(self.replaced)}; "
            f"minMember ({min_member}) bound again"
        )


def _condition(status: str, reason: str, message: str, since: str) -> dict[str, Any]:
    return {
        "type": CONDITION_LOST,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class GangProgress:
    """What the tracker knows beyond the members: failure, binding started, first bind time."""

    failed: bool = False
    binding: bool = False
    start_stamp: str = ""
    losses: LostMembers | None = None
    now: str = ""  # stamps a condition carried over from before a restart when it turns False


def group_status(
    group: GroupInfo, members: Sequence[PodInfo], progress: GangProgress
) -> dict[str, Any]:
    """The PodGroup's `status`: phase, counts, `scheduleStartTime`, the `MembersLost` condition."""
    phases = [phase_of(m) for m in members]
    running, succeeded, failed = (phases.count(p) for p in ("Running", "Succeeded", "Failed"))
    scheduled = bound_count(members)
    need = group.min_member
    losses = progress.losses
    condition = None if losses is None else losses.condition(scheduled, need)
    lost = condition is not None and condition["status"] == "True"
    if condition is None:
        condition, lost = _carried(group.obj, scheduled, need, progress.now)
    out: dict[str, Any] = {
        "phase": _phase(progress, need, (running, succeeded, scheduled), lost),
        "scheduled": scheduled,
        "running": running,
        "succeeded": succeeded,
        "failed": failed,
    }
    if progress.start_stamp:
        out["scheduleStartTime"] = progress.start_stamp
    if condition is not None:
        out["conditions"] = [*_other_conditions(group.obj), condition]
    return out


def _phase(progress: GangProgress, need: int, counts: tuple[int, int, int], lost: bool) -> str:
    running, succeeded, scheduled = counts
    if progress.failed:
        return "Failed"
    if succeeded >= need:
        return "Finished"
    if running + succeeded >= need:
        return "Running"
    if scheduled >= need:
        return "Scheduled"
    if progress.binding:
        return "Scheduling"
    return PHASE_UNKNOWN if lost else "Pending"


def _carried(
    obj: Mapping[str, Any], bound: int, need: int, now: str
) -> tuple[dict[str, Any] | None, bool]:
    """A `MembersLost` condition this process has no record of (written before a restart): kept
    while the gang is short, turned False once `minMember` are bound."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") != CONDITION_LOST or condition.get("status") != "True":
            continue
        if bound < need:
            return dict(condition), True
        message = f"lost members replaced; minMember ({need}) bound again"
        return _condition("False", REASON_REPLACED, message, now), False
    return None, False


def _other_conditions(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Conditions of other types already on the PodGroup (a merge patch replaces the list)."""
    found = (obj.get("status") or {}).get("conditions") or []
    return [dict(c) for c in found if isinstance(c, Mapping) and c.get("type") != CONDITION_LOST]
