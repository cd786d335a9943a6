"""The PodResources client over a real unix socket against the fake kubelet server."""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from agent.availability import (
    ClaimDevice,
    ClaimGrant,
    ContainerGrant,
    DeviceGrant,
    MemoryGrant,
    PodGrant,
    PodResourcesSnapshot,
)
from deviceplugin.podresources import (
    PodResourcesClient,
    PodResourcesError,
    PodResourcesUnavailableError,
)
from deviceplugin.testing.podresources_server import FakePodResourcesServer
from tests.builders.clock import FakeClock

GPU = "nvidia.com/gpu"


@pytest.fixture
def server():
    with FakePodResourcesServer() as fake:
        yield fake


def _pod(ns: str, name: str, *ids: str, cpus=(), memory=()) -> PodGrant:
    devices = (DeviceGrant(resource_name=GPU, device_ids=ids, numa_nodes=(0,)),) if ids else ()
    return PodGrant(
        namespace=ns,
        name=name,
        containers=(ContainerGrant(name="c", devices=devices, cpu_ids=cpus, memory=memory),),
    )


def test_snapshot_reads_allocatable_and_pods(server) -> None:
    allocatable = PodResourcesSnapshot(
        devices=(DeviceGrant(resource_name=GPU, device_ids=("GPU-a", "GPU-b"), numa_nodes=(1,)),),
        cpu_ids=(3, 1, 2),
        memory=(MemoryGrant(memory_type="memory", size=1 << 30, numa_nodes=(0,)),),
    )
    server.set_allocatable(allocatable)
    hugepages = (MemoryGrant(memory_type="hugepages-1Gi", size=1 << 30, numa_nodes=(1,)),)
    server.set_pod(_pod("ml", "train", "GPU-a", cpus=(2, 1), memory=hugepages))
    with PodResourcesClient(server.socket) as client:
        snap = client.snapshot()
    assert snap.devices == allocatable.devices
    assert snap.cpu_ids == (1, 2, 3)
    assert snap.memory == allocatable.memory
    assert snap.pods == (_pod("ml", "train", "GPU-a", cpus=(1, 2), memory=hugepages),)
    assert server.calls == {"GetAllocatableResources": 1, "List": 1}


def test_dynamic_resources_are_read_per_container(server) -> None:
    claims = (
        ClaimGrant(
            claim_namespace="ml",
            claim_name="train-gpus",
            devices=(
                ClaimDevice(
                    driver="gpu.gputopo.io",
                    pool="node-a",
                    device="gpu-3",
                    cdi_devices=("k8s.gputopo.io/claim=uid-1-gpu-3",),
                ),
                ClaimDevice(driver="gpu.gputopo.io", pool="node-a", device="gpu-4", share_id="s-1"),
            ),
        ),
    )
    pod = PodGrant(
        namespace="ml",
        name="train",
        containers=(ContainerGrant(name="main", claims=claims), ContainerGrant(name="side")),
    )
    server.set_pod(pod)
    with PodResourcesClient(server.socket) as client:
        assert client.snapshot().pods == (pod,)
        assert client.pods() == (pod,)


def test_terminal_pods_are_skipped(server) -> None:
    server.set_pod(_pod("a", "done", "GPU-a"))
    server.set_pod(_pod("a", "running", "GPU-b"))
    with PodResourcesClient(server.socket) as client:
        snap = client.snapshot(is_terminal=lambda ns, name: name == "done")
    assert [p.name for p in snap.pods] == ["running"]


def test_absent_socket_is_unavailable() -> None:
    missing = Path(tempfile.mkdtemp(dir="/tmp")) / "kubelet.sock"
    with PodResourcesClient(missing) as client:
        assert not client.available()
        with pytest.raises(PodResourcesUnavailableError, match="does not exist"):
            client.snapshot()


def test_rpc_failures_name_the_call(server) -> None:
    with PodResourcesClient(server.socket, timeout_s=1.0) as client:
        server.fail_next(grpc.StatusCode.UNIMPLEMENTED)
        with pytest.raises(
            PodResourcesError, match=r"GetAllocatableResources.*UNIMPLEMENTED.*older than 1.23"
        ):
            client.snapshot()
        server.fail_next(grpc.StatusCode.UNAVAILABLE)
        with pytest.raises(PodResourcesUnavailableError, match="UNAVAILABLE"):
            client.snapshot()
        server.fail_next(grpc.StatusCode.INTERNAL, method="List")
        with pytest.raises(PodResourcesError, match=r"List on .*INTERNAL"):
            client.snapshot()
        assert client.snapshot().pods == ()


def test_kubelet_restart_is_survived(server) -> None:
    server.set_pod(_pod("a", "p", "GPU-a"))
    with PodResourcesClient(server.socket, timeout_s=1.0) as client:
        assert len(client.snapshot().pods) == 1
        server.stop()
        with pytest.raises(PodResourcesUnavailableError):
            client.snapshot()
        server.start()
        assert len(client.snapshot().pods) == 1


def test_the_first_call_after_a_crashed_kubelet_is_back_is_served(server) -> None:
    """A killed kubelet leaves its socket file; every call meanwhile is refused, and gRPC waits
    longer between reconnection tries (1 s, 1.6 s, 2.6 s, 4.1 s ...), failing calls at once while
    it waits. The restarted kubelet's socket is a new file: the client dials it at once."""
    server.set_pod(_pod("a", "p", "GPU-a"))
    with PodResourcesClient(server.socket, timeout_s=1.0) as client:
        assert len(client.snapshot().pods) == 1
        server.crash()
        assert client.available()  # the stale socket file is still there
        refused = 0
        down_until = time.monotonic() + 6.0
        while time.monotonic() < down_until:
            with pytest.raises(PodResourcesUnavailableError):
                client.snapshot()
            refused += 1
            time.sleep(0.1)
        server.start()
        assert len(client.snapshot().pods) == 1, f"after {refused} refused calls"


def test_state_reader_no_kubelet_versus_kubelet_restart() -> None:
    from agent.cli.publish_service import StateReader
    from tests.builders.topology import dgx_h100

    inv = dgx_h100()
    server = FakePodResourcesServer()
    with PodResourcesClient(server.socket, timeout_s=1.0) as client:
        reader = StateReader(client, inventory=lambda: inv, unhealthy=frozenset)
        no_kubelet = reader()
        assert no_kubelet is not None
        assert no_kubelet.snapshot is None  # never seen a kubelet: allocationSource none
        server.start()
        server.set_pod(_pod("a", "p", "GPU-a"))
        seen = reader()
        assert seen is not None
        assert seen.snapshot is not None
        assert len(seen.snapshot.pods) == 1
        server.stop()  # the kubelet restarts: its socket is gone for a while
        assert reader() is None  # publish nothing rather than "all free"
        server.start()
        back = reader()
        assert back is not None
        assert back.snapshot is not None
    server.close()


def test_restart_serves_a_new_socket_that_lists_no_pods_until_synced(server) -> None:
    allocatable = PodResourcesSnapshot(
        devices=(DeviceGrant(resource_name=GPU, device_ids=("GPU-a", "GPU-b")),)
    )
    server.set_allocatable(allocatable)
    server.set_pod(_pod("a", "p", "GPU-a"))
    before = server.socket.stat()
    with PodResourcesClient(server.socket, timeout_s=1.0) as client:
        server.restart(unsynced_s=math.inf)  # as the real kubelet: no pods until it re-synced
        after = server.socket.stat()
        unsynced = client.snapshot()
        assert not server.synced
        server.sync_now()
        synced = client.snapshot()
    assert (after.st_ino, after.st_ctime_ns) != (before.st_ino, before.st_ctime_ns)
    assert unsynced.pods == ()
    assert unsynced.devices == allocatable.devices  # GetAllocatableResources is already right
    assert [p.name for p in synced.pods] == ["p"]
    assert server.restarts == 1


def test_unsynced_window_ends_by_itself_on_the_server_s_clock() -> None:
    clock = FakeClock()
    with (
        FakePodResourcesServer(clock=clock) as server,
        PodResourcesClient(server.socket, timeout_s=1.0) as client,
    ):
        server.set_pod(_pod("a", "p", "GPU-a"))
        server.restart(unsynced_s=2.0)
        first = client.snapshot()
        clock.advance(1.9)
        still = client.snapshot()
        clock.advance(0.1)
        last = client.snapshot()
    assert (first.pods, still.pods) == ((), ())
    assert [p.name for p in last.pods] == ["p"]


def test_a_temporary_folder_is_made_only_without_a_socket_path_and_removed_on_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs) -> str:
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    given = Path(real_mkdtemp(dir="/tmp")) / "kubelet.sock"
    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    with FakePodResourcesServer(given) as server:
        assert server.socket.is_socket()
    assert made == []
    with FakePodResourcesServer() as server:
        assert server.socket.is_socket()
        assert [server.socket.parent] == [Path(m) for m in made]
    assert not Path(made[0]).exists()
    given.parent.rmdir()
