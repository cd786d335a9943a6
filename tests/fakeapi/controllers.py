"""What controllers and kubelets of a real cluster would do to objects, as one-call helpers."""

from __future__ import annotations

from collections.abc import Callable

from tests.fakeapi.kinds import NOT_READY_TAINT
from tests.fakeapi.objects import upsert_condition
from tests.fakeapi.store import Obj, clone


def node_ready_change(
    name: str, cap: dict[str, str], alloc: dict[str, str], now: str
) -> Callable[[Obj | None], Obj]:
    """A store mutation: the node reports Ready and loses the not-ready taint."""

    def change(old: Obj | None) -> Obj:
        if old is None:
            raise KeyError(f"fake API server: node {name!r} does not exist")
        node = clone(old)
        spec = node.setdefault("spec", {})
        spec["taints"] = [
            t for t in spec.get("taints") or [] if t.get("key") != NOT_READY_TAINT["key"]
        ]
        node["status"] = ready_status(name, cap, alloc, now, node.get("status") or {})
        return node

    return change


def ready_status(name: str, cap: dict[str, str], alloc: dict[str, str], now: str, old: Obj) -> Obj:
    conditions = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    ]
    status = clone(old)
    status.update(
        capacity=cap,
        allocatable=alloc,
        conditions=[
            {
                "type": t,
                "status": s,
                "reason": r,
                "message": r,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for t, s, r in conditions
        ],
        addresses=[
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": name},
        ],
    )
    status["nodeInfo"] = dict(
        status.get("nodeInfo") or {},
        kubeletVersion="v1.28.0",
        operatingSystem="linux",
        architecture="amd64",
    )
    return status


def pod_started_change(now: str, ready: bool) -> Callable[[Obj | None], Obj]:
    """A store mutation: what a kubelet reports once a bound pod's containers run: phase
    `Running`, `startTime`, and `Initialized`, `Ready`, `ContainersReady` conditions (the last
    two False with `ready=False`)."""

    def change(old: Obj | None) -> Obj:
        if old is None or not (old.get("spec") or {}).get("nodeName"):
            raise KeyError("fake API server: only an existing, bound pod can start")
        pod = clone(old)
        status = pod.setdefault("status", {})
        status["phase"] = "Running"
        status.setdefault("startTime", now)
        conditions = list(status.get("conditions") or [])
        for kind in ("Initialized", "Ready", "ContainersReady"):
            state = "True" if ready or kind == "Initialized" else "False"
            wanted = {
                "type": kind,
                "status": state,
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
            conditions = upsert_condition(conditions, wanted)
        status["conditions"] = conditions
        return pod

    return change


PODGC_REASON = "DeletionByPodGC"
PODGC_MESSAGE = "PodGC: node no longer exists"


def podgc_fail_change(now: str) -> Callable[[Obj | None], Obj | None]:
    """A store mutation: what PodGC writes (v1.26+, PodDisruptionConditions on by default) before
    it force-deletes a pod whose node is gone: phase Failed and the `DisruptionTarget` condition.
    A pod already Succeeded or Failed is left as it is (PodGC then only deletes it)."""

    def change(old: Obj | None) -> Obj | None:
        if old is None:
            return None
        status = old.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            return old
        pod = clone(old)
        new_status = pod.setdefault("status", {})
        new_status["phase"] = "Failed"
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": PODGC_REASON,
            "message": PODGC_MESSAGE,
            "lastTransitionTime": now,
        }
        others = [
            c for c in new_status.get("conditions") or [] if c.get("type") != "DisruptionTarget"
        ]
        new_status["conditions"] = [*others, condition]
        return pod

    return change
