"""A fake kubelet PodResources v1 server over a real unix socket, for tests and benchmarks.

It serves `List`, `GetAllocatableResources` and `Get` from state the test sets with the plain
dataclasses of `agent.availability` (`set_allocatable`, `set_pod`, `remove_pod`; a container's
DRA `claims` are its `dynamic_resources`). `fail_next(code)` makes the next call(s) fail with a
gRPC status; `calls` counts requests per method; `changed` is an Event set on every state change
(benchmarks time from it).

`restart(down_s=..., unsynced_s=...)` is what a kubelet restart looks like from the outside: the
socket goes away, a new socket file is served at the same path, and for `unsynced_s` `List` (and
`Get`) see no pods while `GetAllocatableResources` is already right, as the real kubelet answers
before it has re-synced its pods from the API server (reference notes, kubelet item 13).
`sync_now()` ends that window early. That window is measured by `clock` (a test's fake clock, or
`time.monotonic`).

Without a `socket` path the server makes a temporary folder for one; `close()` (or leaving the
`with` block) stops it and removes that folder.
"""

from __future__ import annotations

import math
import shutil
import socket as sockets
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent import futures
from pathlib import Path

import grpc

from agent.availability import (
    ClaimGrant,
    DeviceGrant,
    MemoryGrant,
    PodGrant,
    PodResourcesSnapshot,
)
from agent.objkey import object_key
from deviceplugin._pb import podresources_pb2 as pb
from deviceplugin._pb import podresources_pb2_grpc as pb_grpc


def _topology(numa: Iterable[int]) -> pb.TopologyInfo:
    return pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in numa])


def _devices(grants: Iterable[DeviceGrant]) -> list[pb.ContainerDevices]:
    return [
        pb.ContainerDevices(
            resource_name=g.resource_name,
            device_ids=list(g.device_ids),
            topology=_topology(g.numa_nodes),
        )
        for g in grants
    ]


def _memory(grants: Iterable[MemoryGrant]) -> list[pb.ContainerMemory]:
    return [
        pb.ContainerMemory(memory_type=g.memory_type, size=g.size, topology=_topology(g.numa_nodes))
        for g in grants
    ]


def _claims(grants: Iterable[ClaimGrant]) -> list[pb.DynamicResource]:
    return [
        pb.DynamicResource(
            claim_name=g.claim_name,
            claim_namespace=g.claim_namespace,
            claim_resources=[
                pb.ClaimResource(
                    cdi_devices=[pb.CDIDevice(name=n) for n in d.cdi_devices],
                    driver_name=d.driver,
                    pool_name=d.pool,
                    device_name=d.device,
                    share_id=d.share_id,
                )
                for d in g.devices
            ],
        )
        for g in grants
    ]


def _pod(pod: PodGrant) -> pb.PodResources:
    return pb.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            pb.ContainerResources(
                name=c.name,
                devices=_devices(c.devices),
                cpu_ids=list(c.cpu_ids),
                memory=_memory(c.memory),
                dynamic_resources=_claims(c.claims),
            )
            for c in pod.containers
        ],
    )


class FakePodResourcesServer(pb_grpc.PodResourcesListerServicer):
    """Start with `start()` or as a context manager; `socket` is the path to dial."""

    def __init__(
        self, socket: Path | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._folder: Path | None = None
        if socket is None:
            self._folder = Path(tempfile.mkdtemp(prefix="podres-", dir="/tmp"))
            socket = self._folder / "kubelet.sock"
        self.socket = socket
        self._clock = clock
        self.calls: Counter[str] = Counter()
        self.changed = threading.Event()
        self._lock = threading.Lock()
        self._allocatable = PodResourcesSnapshot()
        self._pods: dict[tuple[str, str], PodGrant] = {}
        self._failures: list[tuple[str | None, grpc.StatusCode]] = []
        self._server: grpc.Server | None = None
        self._unsynced_until = -math.inf
        self.restarts = 0

    def __enter__(self) -> FakePodResourcesServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop, and remove the temporary folder made for the socket (if this server made one)."""
        self.stop()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def start(self, *, unsynced_s: float = 0.0) -> None:
        """Serve on `socket`; `List` and `Get` see no pods for `unsynced_s` (math.inf: until
        `sync_now()`)."""
        with self._lock:
            self._unsynced_until = self._clock() + unsynced_s if unsynced_s > 0 else -math.inf
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix:{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)

    def crash(self) -> None:
        """The kubelet process dies: nothing serves, but its socket file stays behind (a stopped
        gRPC server removes its socket; a killed kubelet does not), so dialling it is refused.
        `start()` then serves on a new socket file, as a restarted kubelet does."""
        self.stop()
        stale = sockets.socket(sockets.AF_UNIX)
        try:
            stale.bind(str(self.socket))
        finally:
            stale.close()

    def restart(self, *, down_s: float = 0.0, unsynced_s: float = 1.0) -> None:
        """A kubelet restart: no socket for `down_s`, then a new one whose `List` answers no pods
        for `unsynced_s` (the real kubelet: about a second)."""
        self.stop()
        if down_s > 0:
            threading.Event().wait(down_s)  # the kubelet process is down: nothing listens
        self.restarts += 1
        self.start(unsynced_s=unsynced_s)

    @property
    def synced(self) -> bool:
        """False while `List` answers no pods after a restart."""
        with self._lock:
            return self._synced_locked()

    def sync_now(self) -> None:
        """End the after-restart window now: `List` answers the pods again."""
        with self._lock:
            self._unsynced_until = -math.inf
        self.changed.set()

    # -- state ---------------------------------------------------------------------------------

    @property
    def allocatable(self) -> PodResourcesSnapshot:
        with self._lock:
            return self._allocatable

    def set_allocatable(self, snapshot: PodResourcesSnapshot) -> None:
        """Devices, CPUs and memory GetAllocatableResources answers (`snapshot.pods` is ignored)."""
        with self._lock:
            self._allocatable = snapshot
        self.changed.set()

    def set_pod(self, pod: PodGrant) -> None:
        with self._lock:
            self._pods[(pod.namespace, pod.name)] = pod
        self.changed.set()

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._pods.pop((namespace, name), None)
        self.changed.set()

    def fail_next(self, code: grpc.StatusCode, times: int = 1, method: str | None = None) -> None:
        """The next `times` calls (of `method`, or of any method) fail with `code`."""
        with self._lock:
            self._failures += [(method, code)] * times

    # -- gRPC ----------------------------------------------------------------------------------

    def _enter(self, method: str, context: grpc.ServicerContext) -> None:
        with self._lock:
            self.calls[method] += 1
            pos = next((i for i, (m, _) in enumerate(self._failures) if m in {None, method}), None)
            failure = None if pos is None else self._failures.pop(pos)[1]
        if failure is not None:
            context.abort(failure, f"injected failure of {method}")

    def _synced_locked(self) -> bool:
        return self._clock() >= self._unsynced_until

    def List(  # noqa: N802
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        self._enter("List", context)
        with self._lock:
            pods = list(self._pods.values()) if self._synced_locked() else []
        return pb.ListPodResourcesResponse(pod_resources=[_pod(p) for p in pods])

    def GetAllocatableResources(  # noqa: N802
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        self._enter("GetAllocatableResources", context)
        with self._lock:
            alloc = self._allocatable
        return pb.AllocatableResourcesResponse(
            devices=_devices(alloc.devices),
            cpu_ids=list(alloc.cpu_ids),
            memory=_memory(alloc.memory),
        )

    def Get(  # noqa: N802
        self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        self._enter("Get", context)
        with self._lock:
            pod = self._pods.get((request.pod_namespace, request.pod_name))
            pod = pod if self._synced_locked() else None
        if pod is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {object_key(request.pod_namespace, request.pod_name)} not found",
            )
        return pb.GetPodResourcesResponse(pod_resources=_pod(pod))
