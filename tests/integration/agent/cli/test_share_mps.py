"""Share Allocate under `sharing.mps` (DESIGN §12): the real agent process answers each MPS client
with its user's pipe directory (mounted), its user's own shm tmpfs as /dev/shm, the memory limit
and, when given, the compute limit its share Lease names; a pod another scheduler placed gets an
equal split whatever it asks; a uid with no daemon, or no runAsUser where root has none, is
refused naming the pod, the uid and the users; while the MPS status file says a daemon is down,
every replica is Unhealthy."""

from __future__ import annotations

import importlib.util
import time
from contextlib import contextmanager

import grpc
import pytest

from agent.inventory import load_inventory
from agent.mps.layout import MpsLayout
from agent.mps.status import DaemonStatus, MpsStatus, decode_status, write_status
from agent.shares import GPU_COMPUTE
from deviceplugin.mps_env import MEMORY_ENV, PIPE_ENV, THREADS_ENV
from tests.builders.scheduler import events_for
from tests.builders.sharenode import (
    FIXTURE,
    GPU,
    ROOT,
    mps_serving,
    share_container,
    share_node,
    share_pod,
)

REPLICAS = 4


@pytest.fixture(scope="module")
def node():
    with share_node(mode="mps", replicas=REPLICAS) as made:
        made.start_agent()
        yield made


def mounts(admission, container: str) -> dict[str, str]:
    response = admission.responses[container][GPU]
    return {m.container_path: m.host_path for m in response.mounts}


def test_an_mps_client_gets_its_users_pipe_and_its_limits(node):
    container = share_container("main", "10Gi", **{GPU_COMPUTE: "30"})
    container["securityContext"] = {"runAsUser": 1000}
    pod = node.scheduler.place(share_pod("mps-user", container), {"main": node.uuid(2)})
    (done,) = node.admitter.admit(pod)
    assert done.error is None
    env = done.env("main", GPU)
    assert env["NVIDIA_VISIBLE_DEVICES"] == node.uuid(2)
    assert (env[PIPE_ENV], env[MEMORY_ENV], env[THREADS_ENV]) == (
        f"{node.mps_root}/1000/pipe", "0=10240M", "30",
    )  # fmt: skip
    assert mounts(done, "main") == {
        f"{node.mps_root}/1000/pipe": f"{node.mps_root}/1000/pipe",
        "/dev/shm": f"{node.mps_root}/1000/shm",  # its user's own tmpfs, never a shared one
    }
    assert events_for(node.fake, "mps-user") == []
    node.scheduler.wait_released()
    node.admitter.remove(pod)


def test_a_pod_without_run_as_user_is_served_as_root_where_root_has_a_daemon(node):
    body = share_pod("mps-root", share_container("main", None))
    body["spec"]["securityContext"] = {"fsGroup": 2000}
    pod = node.scheduler.place(body, {"main": node.uuid(1)})
    (done,) = node.admitter.admit(pod)
    env = done.env("main", GPU)
    split = load_inventory(FIXTURE).gpus[1].memory_mib // REPLICAS
    assert (env[PIPE_ENV], env[MEMORY_ENV]) == (f"{node.mps_root}/0/pipe", f"0={split}M")
    assert mounts(done, "main")["/dev/shm"] == f"{node.mps_root}/0/shm"
    assert THREADS_ENV not in env
    node.scheduler.wait_released()
    node.admitter.remove(pod)


@contextmanager
def mps_users(node, *uids: int):
    """The MPS status file names only these users' daemons for a while."""
    status_file = MpsLayout(node.mps_root).status_file
    serving = status_file.read_text(encoding="utf-8")
    mps_serving(node.mps_root, uids)
    try:
        yield
    finally:
        status_file.write_text(serving, encoding="utf-8")


def test_a_uid_without_a_daemon_is_refused_naming_the_pod_the_uid_and_the_users(node):
    container = share_container("main", "10Gi")
    container["securityContext"] = {"runAsUser": 4242}
    pod = node.scheduler.place(share_pod("mps-stranger", container), {"main": node.uuid(3)})
    (refused,) = node.admitter.admit(pod)
    assert refused.error is not None
    assert (
        "pod default/mps-stranger container main runs as uid 4242, which has no MPS daemon on "
        "this node (MPS users: 0, 1000, 1234"
    ) in refused.error
    assert node.scheduler.holder() is None  # released at once, for the next share pod


def test_a_pod_without_run_as_user_is_refused_where_root_has_no_daemon(node):
    with mps_users(node, 1000):
        pod = node.scheduler.place(share_pod("mps-no-user"), {"main": node.uuid(3)})
        (refused,) = node.admitter.admit(pod)
    assert refused.error is not None
    assert (
        "pod default/mps-no-user container main sets no runAsUser and MPS does not serve root "
        "here (MPS users: 1000)"
    ) in refused.error


def test_a_pod_bound_around_the_scheduler_asking_141gi_gets_the_equal_split(node):
    """`spec.nodeName`, no scheduler, 141Gi asked: its MPS limit is what every count charges
    it (the GPU's memory / its replicas), not what it asked."""
    container = share_container("main", "141Gi")
    container["securityContext"] = {"runAsUser": 1000}
    pod = node.scheduler.bind_unplaced(share_pod("mps-greedy", container))
    (done,) = node.admitter.admit(pod)
    assert done.error is None
    gpu = done.env("main", GPU)["NVIDIA_VISIBLE_DEVICES"]
    memory = {str(g.uuid): g.memory_mib for g in load_inventory(FIXTURE).gpus}[gpu]
    assert done.env("main", GPU)[MEMORY_ENV] == f"0={memory // REPLICAS}M"
    node.admitter.remove(pod)


def test_the_pods_run_as_user_counts_when_the_container_sets_none(node):
    body = share_pod("mps-pod-user")
    body["spec"]["securityContext"] = {"runAsUser": 1234}
    pod = node.scheduler.place(body, {"main": node.uuid(0)})
    (done,) = node.admitter.admit(pod)
    assert done.env("main", GPU)[PIPE_ENV] == f"{node.mps_root}/1234/pipe"
    node.scheduler.wait_released()
    node.admitter.remove(pod)


def test_an_mps_container_asking_two_replicas_is_refused(node):
    body = share_pod("mps-two", share_container("main", None, **{GPU: "2"}))
    pod = node.scheduler.place(body, {"main": node.uuid(0)})
    (refused,) = node.admitter.admit(pod)
    assert refused.error is not None
    assert "failRequestsGreaterThanOne" in refused.error
    assert node.scheduler.holder() is None  # the failing pod's lock is released at once


def test_while_mps_does_not_serve_every_replica_is_unhealthy_and_allocate_says_why(node):
    status_file = MpsLayout(node.mps_root).status_file
    serving = decode_status(status_file.read_text(encoding="utf-8"))
    down = MpsStatus(written_at=time.time() + 3600, gpus=(), daemons=(
        DaemonStatus(uid=0, up=True), DaemonStatus(uid=1000, up=False, reason="exited"),
    ))  # fmt: skip
    write_status(status_file, down)
    try:
        assert node.kubelet.wait_for(lambda k: not k.healthy(GPU), 10.0)
        with pytest.raises(grpc.RpcError) as info:
            node.kubelet.allocate(GPU, [f"{node.uuid(0)}::0"])
        assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "MPS control daemon down for uid 1000 (exited)" in str(info.value.details())
    finally:
        write_status(status_file, serving)
    assert node.kubelet.wait_for(lambda k: len(k.healthy(GPU)) == 8 * REPLICAS, 10.0)


def test_the_share_demo_places_two_mps_clients_on_one_gpu(node):
    spec = importlib.util.spec_from_file_location("share_demo", ROOT / "scripts" / "share_demo.py")
    assert spec is not None
    assert spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    train, notebook = demo.place_two_shares(node)
    assert train["NVIDIA_VISIBLE_DEVICES"] == notebook["NVIDIA_VISIBLE_DEVICES"]
    assert (train[MEMORY_ENV], notebook[MEMORY_ENV]) == ("0=30720M", "0=10240M")
    assert (train[THREADS_ENV], THREADS_ENV in notebook) == ("60", False)
