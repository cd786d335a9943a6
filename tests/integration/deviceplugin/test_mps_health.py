"""Under `sharing.mps` the shared resource follows `gputopo-agent mps`'s status file on the real
ListAndWatch stream: all Unhealthy while MPS does not serve (Allocate refused, naming why),
Healthy again when it does; the unshared GPUs never change."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import grpc
import pytest

from agent.model import HEALTHY, UNHEALTHY
from agent.mps.layout import MpsLayout
from agent.mps.status import STALE_AFTER_S, DaemonStatus, MpsStatus, write_status
from agent.resource_names import GPU_RESOURCE
from agent.shares import Sharing
from deviceplugin.settings import SharedResource, TimeSlicing, XidPolicy
from tests.builders.clock import FakeClock
from tests.builders.kubelet import running_node

SHARED = "nvidia.com/gpu-shared"
REPLICAS = 4


def health(node, resource: str) -> set[str]:
    return {d.health for d in node.kubelet.devices(resource).values()}


def becomes(node, resource: str, state: str) -> bool:
    return node.kubelet.wait_for(lambda k: health(node, resource) == {state}, 5.0)


@pytest.fixture(params=[True, False], ids=["Xid checks on", "Xid checks off"])
def mps_node(request):
    """Two GPUs shared under MPS (renamed), six whole; the MPS root in a fresh directory."""
    root = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))
    clock = FakeClock(start=1_764_190_000.0)
    entry = SharedResource(name=GPU_RESOURCE, replicas=REPLICAS, rename=SHARED, devices=2)
    sharing = TimeSlicing(sharing=Sharing.MPS, resources=(entry,))
    policy = XidPolicy(disabled=not request.param)
    try:
        with running_node(
            "dgx-a100", wall_clock=clock, time_slicing=sharing, mps_root=str(root),
            xid_policy=policy,
        ) as node:  # fmt: skip
            yield node, MpsLayout(root).status_file, clock
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_shared_resource_follows_the_mps_status(mps_node):
    node, status_file, clock = mps_node
    assert becomes(node, SHARED, UNHEALTHY)  # no status file: MPS is not running
    assert len(node.kubelet.devices(SHARED)) == 2 * REPLICAS
    replica = f"{node.uuid(0)}::0"
    with pytest.raises(grpc.RpcError) as info:
        node.kubelet.allocate(SHARED, [replica])
    assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert f"every device of {SHARED} is Unhealthy: MPS is not running" in str(info.value.details())

    def write(*daemons: DaemonStatus) -> None:
        write_status(status_file, MpsStatus(written_at=clock(), gpus=(), daemons=daemons))

    write(DaemonStatus(uid=0, up=True))
    assert becomes(node, SHARED, HEALTHY)
    assert node.kubelet.allocate(SHARED, [replica]).container_responses
    write(DaemonStatus(uid=0, up=True), DaemonStatus(uid=1000, up=False, reason="exited"))
    assert becomes(node, SHARED, UNHEALTHY)
    with pytest.raises(grpc.RpcError) as info:
        node.kubelet.allocate(SHARED, [replica])
    assert "MPS control daemon down for uid 1000 (exited)" in str(info.value.details())
    write(DaemonStatus(uid=0, up=True), DaemonStatus(uid=1000, up=True))
    assert becomes(node, SHARED, HEALTHY)
    clock.advance(STALE_AFTER_S + 1)  # the supervisor stopped writing
    assert becomes(node, SHARED, UNHEALTHY)
    assert health(node, GPU_RESOURCE) == {HEALTHY}  # the unshared GPUs never change
    assert node.kubelet.allocate(GPU_RESOURCE, [node.uuid(5)]).container_responses
