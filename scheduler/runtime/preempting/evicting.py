"""The API writes of a preemption (DESIGN §11), off the scheduling loop, only while leader.

For each victim, in order: the condition `DisruptionTarget` (reason `PreemptionByScheduler`) on
`pods/status`, its message naming the preemptor's unit (`disruption_message`: a new leader
reads it back with `preemptor_of`), then the deletion with the pod's own grace period (never the
Eviction API, whose 429s would leave half a gang evicted) and a `Preempted` Event. The
preemptor's pods get `status.nominatedNodeName` (cleared again when the nomination ends) and a
`Preempting` Event. A victim already gone counts as deleted; any other failure is handed back
(`on_failed`) so the loop can release the nomination and search again later.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agent.objkey import ObjectKey
from scheduler.errors import ApiError, NotFoundError
from scheduler.kubeapi.client import DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER, KubeClient
from scheduler.kubeapi.leader import Fence
from scheduler.runtime.metrics import SchedulerMetrics
from scheduler.runtime.reporter import Reporter

__all__ = ["EvictionWriter", "Victim", "disruption_message", "preemptor_of"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
REASON_PREEMPTED = "Preempted"
REASON_PREEMPTING = "Preempting"
_MARK = "preempted to make room for "
_UNIT = re.compile(re.escape(_MARK) + r"(?P<unit>(?:pod|gang)/\S+)")


def disruption_message(scheduler: str, unit: str, priority: int) -> str:
    """The `DisruptionTarget` message: who preempted the pod, for whom (read by `preemptor_of`)."""
    return f"{scheduler}: {_MARK}{unit} (priority {priority})"


def preemptor_of(pod: Obj, scheduler: str) -> str | None:
    """The unit a victim was preempted for, when `scheduler` marked it (None otherwise)."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if (
            condition.get("type") == DISRUPTION_TARGET
            and condition.get("reason") == PREEMPTION_BY_SCHEDULER
            and condition.get("status") == "True"
        ):
            message = str(condition.get("message") or "")
            found = _UNIT.search(message)
            if found is not None and message.startswith(f"{scheduler}: "):
                return found.group("unit")
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    key: ObjectKey
    namespace: str
    name: str
    uid: str
    node: str
    obj: Obj


Failed = Callable[[str, ObjectKey], None]


class EvictionWriter:
    def __init__(
        self,
        kube: KubeClient,
        fence: Fence,
        reporter: Reporter,
        metrics: SchedulerMetrics,
        on_failed: Failed,
        workers: int = 8,
    ) -> None:
        """`on_failed(unit, pod)`: the eviction of `pod` for `unit` failed (not gone)."""
        self._kube, self._fence, self._reporter = kube, fence, reporter
        self._metrics, self._on_failed = metrics, on_failed
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="evict")

    def evict(self, unit: str, message: str, victims: Sequence[Victim]) -> None:
        """Mark and delete every victim (in parallel), each with a `Preempted` Event."""
        for victim in victims:
            self._pool.submit(self._evict_one, unit, message, victim)

    def _evict_one(self, unit: str, message: str, victim: Victim) -> None:
        if not self._fence.may_bind():
            log.info("not the leader: %s is not evicted for %s", victim.key, unit)
            self._on_failed(unit, victim.key)
            return
        try:
            self._kube.mark_disruption_target(victim.namespace, victim.name, message)
            self._kube.delete_pod(victim.namespace, victim.name, victim.uid)
        except NotFoundError:
            log.info("victim %s of %s was already gone", victim.key, unit)
            return
        except ApiError as exc:
            self._metrics.api_errors.labels(operation=exc.operation.split(" ", 1)[0]).inc()
            log.warning("evicting %s for %s failed: %s", victim.key, unit, exc)
            self._on_failed(unit, victim.key)
            return
        except Exception:
            log.exception("evicting %s for %s failed unexpectedly", victim.key, unit)
            self._on_failed(unit, victim.key)
            return
        log.info("evicted %s on %s for %s", victim.key, victim.node, unit)
        self._reporter.note(
            victim.obj, "Pod", REASON_PREEMPTED, f"Preempted by {unit} on node {victim.node}"
        )

    def nominate(self, pods: Mapping[ObjectKey, tuple[Obj, str | None]], note: str) -> None:
        """Set (a node) or clear (None) `status.nominatedNodeName` on each pod; with `note`, a
        `Preempting` Event on each saying it."""
        for obj, node in pods.values():
            self._pool.submit(self._nominate_one, obj, node)
            if note:
                self._reporter.note(obj, "Pod", REASON_PREEMPTING, note)

    def _nominate_one(self, obj: Obj, node: str | None) -> None:
        if not self._fence.may_bind():
            return
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        try:
            self._kube.set_nominated_node(namespace, name, node)
        except NotFoundError:
            return
        except ApiError as exc:
            self._metrics.api_errors.labels(operation=exc.operation.split(" ", 1)[0]).inc()
            log.warning("nominatedNodeName of %s/%s: %s", namespace, name, exc)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
