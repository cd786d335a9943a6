"""The MPS part of health (DESIGN §12): which resources go all Unhealthy while MPS does not serve,
and the watch that reads the status file on a fake wall clock."""

from __future__ import annotations

import logging

import pytest

from agent.inventory import load_inventory
from agent.mps.status import STALE_AFTER_S, DaemonStatus, MpsStatus, write_status
from agent.resource_names import GPU_RESOURCE
from agent.shares import Sharing
from deviceplugin.health import MpsWatch, mps_down
from deviceplugin.resources import Resource, build_resources
from deviceplugin.settings import PluginSettings, SharedResource, TimeSlicing
from tests.builders.clock import FakeClock

SHARED = "nvidia.com/gpu-shared"
DOWN = "MPS control daemon down for uid 1000 (exited)"


def resources(sharing: Sharing) -> dict[str, Resource]:
    """Two of the eight GPUs shared (renamed), the other six whole."""
    entry = SharedResource(name=GPU_RESOURCE, replicas=4, rename=SHARED, devices=2)
    settings = PluginSettings(time_slicing=TimeSlicing(sharing=sharing, resources=(entry,)))
    return {r.name: r for r in build_resources(load_inventory("dgx-a100"), settings)}


@pytest.mark.parametrize(
    ("sharing", "reason", "expected"),
    [
        pytest.param(Sharing.MPS, DOWN, {SHARED: DOWN}, id="MPS down: only the shared resource"),
        pytest.param(Sharing.MPS, None, {}, id="MPS serves: nothing"),
        pytest.param(Sharing.TIME_SLICING, DOWN, {}, id="time-slicing: never"),
    ],
)
def test_mps_down_marks_only_the_shared_resources_under_mps(sharing, reason, expected):
    assert set(resources(sharing)) == {GPU_RESOURCE, SHARED}
    assert mps_down(resources(sharing), sharing, reason) == expected


class Rig:
    """A status file the test writes, and a watch reading it on a fake wall clock (over the
    device plugin's resources, or none: every shared GPU on the DRA driver)."""

    def __init__(self, folder, *, shared_here: bool = True) -> None:
        self.clock = FakeClock(start=1_764_190_000.0)
        self.path = folder / "status.json"
        self.published: list[dict[str, str]] = []
        self.reasons: list[str | None] = []
        self.watch = MpsWatch(
            self.path,
            lambda: resources(Sharing.MPS) if shared_here else {},
            self.publish,
            wall_clock=self.clock,
        )

    def publish(self, down, reason) -> None:
        self.published.append(dict(down))
        self.reasons.append(reason)

    def write(self, *daemons: DaemonStatus) -> None:
        write_status(self.path, MpsStatus(written_at=self.clock(), gpus=(), daemons=daemons))

    def poll(self) -> dict[str, str]:
        self.watch.poll()
        return self.published[-1]


def test_the_watch_follows_the_file_down_and_up(tmp_path):
    r = Rig(tmp_path)
    assert "MPS is not running: no" in r.poll()[SHARED]
    r.write(DaemonStatus(uid=0, up=True), DaemonStatus(uid=1000, up=False, reason="exited"))
    assert r.poll() == {SHARED: DOWN}
    assert r.reasons[-1] == DOWN  # the reason itself, for the DRA driver's shares
    assert r.watch.serving is False
    r.write(DaemonStatus(uid=0, up=True), DaemonStatus(uid=1000, up=True))
    assert r.poll() == {}
    assert r.reasons[-1] is None
    assert r.watch.serving is True
    r.clock.advance(STALE_AFTER_S + 1)  # the supervisor stopped writing
    assert "the MPS supervisor stopped updating it" in r.poll()[SHARED]


def test_each_change_is_logged_once(tmp_path, caplog):
    r = Rig(tmp_path)
    r.write(DaemonStatus(uid=1000, up=False, reason="exited"))
    with caplog.at_level(logging.INFO, logger="deviceplugin.health"):
        for _ in range(3):
            r.poll()
        r.write(DaemonStatus(uid=1000, up=True))
        for _ in range(3):
            r.poll()
        r.clock.advance(STALE_AFTER_S + 1)
        for _ in range(3):
            r.clock.advance(1.0)
            r.poll()  # the reason stays the same while the file only ages
    logged = [(rec.levelname, rec.getMessage()) for rec in caplog.records]
    assert logged == [
        ("WARNING", f"MPS does not serve, {SHARED} Unhealthy: {DOWN}"),
        ("INFO", "MPS serves again: its shared devices are Healthy"),
        ("WARNING", f"MPS does not serve, {SHARED} Unhealthy: {r.poll()[SHARED]}"),
    ]


def test_with_no_shared_resource_here_the_reason_is_still_published_and_logged(tmp_path, caplog):
    r = Rig(tmp_path, shared_here=False)
    r.write(DaemonStatus(uid=1000, up=False, reason="exited"))
    with caplog.at_level(logging.INFO, logger="deviceplugin.health"):
        assert r.poll() == {}
        r.write(DaemonStatus(uid=1000, up=True))
        assert r.poll() == {}
    assert r.reasons == [DOWN, None]
    logged = [(rec.levelname, rec.getMessage()) for rec in caplog.records]
    assert logged == [
        ("WARNING", f"MPS does not serve, every share Unhealthy: {DOWN}"),
        ("INFO", "MPS serves again: its shared devices are Healthy"),
    ]
