"""What controllers and kubelets of a real cluster would do to objects, as one-call helpers."""

from __future__ import annotations

from collections.abc import Callable

from tests.fakeapi.kinds import NOT_READY_TAINT
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
