"""The supervisor over real child processes (the stand-in control daemon) and a FakeClock: start,
one daemon per user, restart with backoff, down in the status file while down, quit on stop."""

from __future__ import annotations

import os

import pytest

from agent.mps.daemon import ControlDaemon
from agent.mps.layout import MpsLayout, MpsUser
from agent.mps.metrics import MpsMetrics
from agent.mps.status import HEARTBEAT_S, decode_status, down_reason
from agent.mps.supervisor import STOPPED, Backoff, Supervisor
from tests.builders.clock import FakeClock
from tests.builders.mps import StandInControl, wait_until

ME = MpsUser(uid=os.geteuid(), gid=os.getegid())
GPUS = ("GPU-0", "GPU-1")


class Rig:
    """A supervisor of `users`' daemons over the stand-in, on a FakeClock."""

    def __init__(self, control: StandInControl, users=(ME,), backoff: Backoff | None = None):
        self.control, self.clock, self.metrics = control, FakeClock(), MpsMetrics("t")
        self.layout = MpsLayout(control.mps_root)
        self.layout.root.mkdir(mode=0o755)
        self.daemons = [
            ControlDaemon(user=u, layout=self.layout, control=control.path) for u in users
        ]
        self.supervisor = Supervisor(
            self.daemons,
            status_path=self.layout.status_file,
            gpus=GPUS,
            backoff=backoff or Backoff(initial_s=1, max_s=8, stable_s=30),
            metrics=self.metrics,
            clock=self.clock,
            wall_clock=self.clock,
        )

    def status(self):
        return decode_status(self.layout.status_file.read_text(encoding="utf-8"))

    def down_reason(self):
        return down_reason(self.layout.status_file, self.clock())

    def sample(self, name: str, uid: int = ME.uid) -> float | None:
        return self.metrics.registry.get_sample_value(name, {"uid": str(uid)})

    def starts(self) -> int:
        """Daemon starts the stand-in recorded (a real child process: poll with wait_until)."""
        return len(self.control.records("start"))

    def restarts(self) -> int:
        """Restarts the supervisor made (known as soon as step() returns)."""
        return self.supervisor.statuses()[0].restarts

    def step_after_exit(self, daemon: ControlDaemon) -> None:
        wait_until(lambda: daemon.exit_code() is not None)
        self.supervisor.step()


@pytest.fixture
def rig(control):
    made: list[Rig] = []

    def make(**kw) -> Rig:
        made.append(Rig(control, **kw))
        return made[-1]

    yield make
    for r in made:
        r.supervisor.stop()


def test_start_runs_each_daemon_and_says_up(rig):
    r = rig()
    r.supervisor.start()
    wait_until(lambda: r.starts() == 1)
    status = r.status()
    assert status.up
    assert status.gpus == GPUS
    assert [(d.uid, d.up) for d in status.daemons] == [(ME.uid, True)]
    assert r.down_reason() is None
    assert r.sample("gputopo_mps_daemon_up") == 1


def test_a_daemon_that_exits_is_down_at_once_and_restarted_after_the_backoff(rig, control):
    r = rig()
    control.crash()
    r.supervisor.start()
    r.step_after_exit(r.daemons[0])
    assert f"uid {ME.uid} (exited with status 3)" in (r.down_reason() or "")
    assert r.sample("gputopo_mps_daemon_up") == 0
    r.clock.advance(0.9)
    r.supervisor.step()
    assert r.restarts() == 0  # still waiting out the first 1 s
    control.crash(False)
    r.clock.advance(0.1)
    r.supervisor.step()
    wait_until(lambda: r.starts() == 2)
    assert r.down_reason() is None
    assert r.status().daemons[0].restarts == 1
    assert r.sample("gputopo_mps_daemon_restarts_total") == 1


def test_the_backoff_doubles_up_to_its_max_while_the_daemon_keeps_failing(rig, control):
    r = rig()
    control.crash()
    r.supervisor.start()
    waits = []
    for _ in range(5):
        r.step_after_exit(r.daemons[0])
        before, waited = r.restarts(), 0.0
        while r.restarts() == before:
            r.clock.advance(0.5)
            waited += 0.5
            r.supervisor.step()
        waits.append(waited)
    assert waits == [1, 2, 4, 8, 8]
    assert r.sample("gputopo_mps_daemon_restarts_total") == 5


def test_a_daemon_up_for_stable_s_fails_again_from_the_first_delay(rig, control):
    r = rig()
    control.crash()
    r.supervisor.start()
    r.step_after_exit(r.daemons[0])
    r.clock.advance(1)
    r.supervisor.step()  # restart 1 (after 1 s); it crashes again: next wait 2 s
    r.step_after_exit(r.daemons[0])
    control.crash(False)
    r.clock.advance(2)
    r.supervisor.step()  # restart 2 runs
    r.clock.advance(30)
    r.supervisor.step()  # up for stable_s: the failures are forgotten
    control.crash()
    r.daemons[0].quit()
    r.step_after_exit(r.daemons[0])
    r.clock.advance(1)
    r.supervisor.step()
    assert r.restarts() == 3  # the first delay again, not 4 s
    wait_until(lambda: r.starts() == 4)


def test_every_user_gets_a_daemon_with_its_own_pipe_directory(rig, control):
    users = (ME, MpsUser(uid=65534, gid=65534)) if os.geteuid() == 0 else (ME,)
    r = rig(users=users)
    r.supervisor.start()
    wait_until(lambda: r.starts() == len(users))
    starts = {s["uid"]: s for s in control.records("start")}
    assert set(starts) == {str(u.uid) for u in users}
    for user in users:
        assert starts[str(user.uid)]["pipe"] == str(r.layout.pipe_dir(user.uid))
    assert len({s["pipe"] for s in starts.values()}) == len(users)
    assert r.status().up


def test_one_users_daemon_down_makes_mps_down_naming_that_user(rig, control):
    if os.geteuid() != 0:
        pytest.skip("a second user's daemon needs root (CAP_SETUID)")
    r = rig(users=(ME, MpsUser(uid=65534, gid=65534)))
    r.supervisor.start()
    wait_until(lambda: r.starts() == 2)
    r.daemons[1].quit()
    r.step_after_exit(r.daemons[1])
    assert [d.up for d in r.status().daemons] == [True, False]
    assert "uid 65534 (exited with status 0)" in r.down_reason()


def test_stop_quits_every_daemon_and_leaves_mps_down(rig, control):
    r = rig()
    r.supervisor.start()
    wait_until(lambda: r.starts() == 1)
    r.supervisor.stop()
    assert [c["command"] for c in control.records("command")] == ["quit"]
    assert r.daemons[0].exit_code() == 0
    assert STOPPED in r.down_reason()


def test_the_status_is_rewritten_every_heartbeat_and_goes_stale_without_one(rig):
    r = rig()
    r.supervisor.start()
    r.clock.advance(HEARTBEAT_S)
    r.supervisor.step()
    assert r.status().written_at == r.clock()
    r.clock.advance(31)  # no step: the supervisor is gone
    assert "s old" in r.down_reason()
