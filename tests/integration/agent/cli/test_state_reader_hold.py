"""`StateReader` + `RestartHold` over the fake PodResources server, on a fake clock: what the agent
counts as used right after a kubelet restart, when the hold ends, and what it logs."""

from __future__ import annotations

import logging
import math
import tempfile
from pathlib import Path

import grpc
import pytest

from agent.cli.publish_service import StateReader
from agent.restart_hold import MAX_HOLD_S, SETTLE_S, RestartHold
from deviceplugin.podresources import PodResourcesClient
from tests.builders.agentnode import serve_socket
from tests.builders.clock import FakeClock
from tests.builders.topology import allocatable_of, dgx_h100, gpu_pod

INVENTORY = dgx_h100()
UUID = [str(g.uuid) for g in INVENTORY.gpus]
HOLD_STARTS = ("kubelet restarted", "PodResources answers again")


@pytest.fixture
def reading(podresources, caplog):
    """(reader, clock, kubelet_socket): a reader that also watches a device-plugin kubelet.sock."""
    caplog.set_level(logging.INFO, logger="agent")
    clock = FakeClock()
    kubelet_socket = serve_socket(Path(tempfile.mkdtemp(dir="/tmp")) / "kubelet.sock")
    podresources.set_allocatable(allocatable_of(INVENTORY))
    for i in (0, 1):
        podresources.set_pod(gpu_pod("ml", f"train-{i}", UUID[i]))
    with PodResourcesClient(podresources.socket, timeout_s=2.0) as client:
        reader = StateReader(
            client,
            inventory=lambda: INVENTORY,
            unhealthy=frozenset,
            kubelet_socket=kubelet_socket,
            hold=RestartHold(clock=clock),
        )
        yield reader, clock, kubelet_socket


def pods(reader) -> list[str]:
    state = reader()
    assert state is not None
    assert state.snapshot is not None
    return sorted(p.name for p in state.snapshot.pods)


def lines(caplog, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


def test_pods_missing_after_a_restart_stay_used_until_the_view_settles(
    reading, podresources, caplog
) -> None:
    reader, clock, _ = reading
    assert pods(reader) == ["train-0", "train-1"]
    podresources.restart(unsynced_s=math.inf)  # a new socket whose List sees no pods yet
    assert pods(reader) == ["train-0", "train-1"]  # held, although the kubelet lists none
    clock.advance(SETTLE_S / 2)
    podresources.remove_pod("ml", "train-1")  # really ends while the kubelet re-syncs
    podresources.sync_now()
    assert pods(reader) == ["train-0", "train-1"]  # the view changed: not settled yet
    clock.advance(SETTLE_S)
    assert pods(reader) == ["train-0"]  # the same answer SETTLE_S later: settled, released
    assert not reader.hold.holding
    assert len(lines(caplog, HOLD_STARTS)) == 1
    (end,) = lines(caplog, "PodResources view")
    assert "settled after" in end
    assert "1 pod(s) it no longer lists released (ml/train-1)" in end


def test_a_new_pod_counts_at_once_during_a_hold(reading, podresources) -> None:
    reader, _, _ = reading
    pods(reader)
    podresources.restart(unsynced_s=math.inf)
    assert pods(reader) == ["train-0", "train-1"]
    podresources.sync_now()
    podresources.set_pod(gpu_pod("ml", "train-2", UUID[2]))
    assert pods(reader) == ["train-0", "train-1", "train-2"]  # a decrease is not held
    assert reader.hold.holding


def test_the_hold_is_bounded_when_the_view_keeps_changing(reading, podresources, caplog) -> None:
    reader, clock, _ = reading
    pods(reader)
    podresources.restart(unsynced_s=math.inf)
    podresources.sync_now()
    podresources.remove_pod("ml", "train-1")
    for i in range(int(MAX_HOLD_S)):  # the kubelet's answer changes every second
        podresources.set_pod(gpu_pod("ml", f"flap-{i}", UUID[2 + i % 6]))
        podresources.remove_pod("ml", f"flap-{i - 1}")
        assert "train-1" in pods(reader)
        clock.advance(1.0)
    assert pods(reader) == [f"flap-{int(MAX_HOLD_S) - 1}", "train-0"]
    assert not reader.hold.holding
    (end,) = lines(caplog, "PodResources view")
    assert f"not settled after {MAX_HOLD_S:.1f} s, hold ended" in end


def test_podresources_answering_again_after_failing_starts_a_hold(
    reading, podresources, caplog
) -> None:
    reader, _, _ = reading
    pods(reader)
    podresources.fail_next(grpc.StatusCode.UNAVAILABLE)
    assert reader() is None
    assert reader.problem is not None
    podresources.remove_pod("ml", "train-0")
    assert pods(reader) == ["train-0", "train-1"]
    assert reader.problem is None
    (start,) = lines(caplog, HOLD_STARTS)
    assert start.startswith("PodResources answers again after failing: holding increases")


def test_a_new_device_plugin_kubelet_socket_starts_a_hold(reading, podresources, caplog) -> None:
    reader, _, kubelet_socket = reading
    pods(reader)
    serve_socket(kubelet_socket)  # the kubelet re-created its device-plugin socket
    podresources.remove_pod("ml", "train-0")
    assert pods(reader) == ["train-0", "train-1"]
    (start,) = lines(caplog, HOLD_STARTS)
    assert f"({kubelet_socket} is a new socket)" in start


def test_without_a_restart_freed_devices_count_at_once(reading, podresources, caplog) -> None:
    reader, _, _ = reading
    assert pods(reader) == ["train-0", "train-1"]
    podresources.remove_pod("ml", "train-1")
    assert pods(reader) == ["train-0"]
    assert not lines(caplog, HOLD_STARTS)
