"""One control daemon as a real child process, against the stand-in `nvidia-cuda-mps-control`:
started in the foreground with only its own environment, as its user, and stopped by `quit`."""

from __future__ import annotations

import os
import stat

import pytest

from agent.mps.daemon import ControlDaemon
from agent.mps.layout import MpsLayout, MpsUser
from tests.builders.mps import StandInControl, wait_until

ME = MpsUser(uid=os.geteuid(), gid=os.getegid())
NOBODY = MpsUser(uid=65534, gid=65534)


def _daemon(control: StandInControl, user: MpsUser = ME, **kw) -> ControlDaemon:
    layout = MpsLayout(control.mps_root)
    layout.root.mkdir(mode=0o755, exist_ok=True)
    return ControlDaemon(user=user, layout=layout, control=control.path, **kw)


def test_the_daemon_runs_in_the_foreground_with_its_pipe_and_log_directories(control):
    daemon = _daemon(control, environ={"PATH": os.environ["PATH"], "GPUTOPO_TEST_SECRET": "x"})
    daemon.start()
    wait_until(lambda: control.records("start"))
    (start,) = control.records("start")
    layout = daemon.layout
    assert start["pid"] == str(daemon.pid)
    assert daemon.exit_code() is None  # -f: it stays in the foreground, a child of ours
    assert start["pipe"] == str(layout.pipe_dir(ME.uid)) == f"{control.mps_root}/{ME.uid}/pipe"
    assert start["log"] == str(layout.log_dir(ME.uid)) == f"{control.mps_root}/{ME.uid}/log"
    assert (start["visible"], start["secret"]) == ("unset", "unset")
    mode = stat.S_IMODE(os.stat(layout.pipe_dir(ME.uid)).st_mode)
    assert mode == 0o700  # only this user's clients reach the daemon
    daemon.quit()


def test_quit_is_written_to_the_control_pipe_and_the_daemon_exits(control):
    daemon = _daemon(control)
    daemon.start()
    wait_until(lambda: control.records("start"))
    daemon.quit(timeout_s=5)
    (command,) = control.records("command")
    assert command["command"] == "quit"
    assert command["pipe"] == str(daemon.layout.pipe_dir(ME.uid))
    assert daemon.exit_code() == 0
    assert [r["pid"] for r in control.records("exit")] == [str(daemon.pid)]


def test_only_the_shared_gpus_are_visible_to_the_daemon(control):
    daemon = _daemon(control, visible_gpus=["GPU-a", "GPU-b"])
    daemon.start()
    wait_until(lambda: control.records("start"))
    assert control.records("start")[0]["visible"] == "GPU-a,GPU-b"
    daemon.quit()


def test_a_missing_control_binary_is_an_exit_not_a_crash(control):
    layout = MpsLayout(control.mps_root)
    daemon = ControlDaemon(user=ME, layout=layout, control=str(control.dir / "absent"))
    daemon.start()
    wait_until(lambda: daemon.exit_code() is not None)
    assert daemon.exit_code() == 127  # the shell's "command not found"


def test_a_daemon_that_will_not_quit_is_terminated(control):
    daemon = _daemon(control)
    daemon.start()
    wait_until(lambda: control.records("start"))
    os.chmod(control.path, 0o644)  # the `quit` client cannot run: no command reaches the daemon
    daemon.quit(timeout_s=2)
    assert daemon.exit_code() is not None
    assert control.records("command") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root (CAP_SETUID)")
def test_another_users_daemon_runs_as_that_user_without_roots_groups(control):
    daemon = _daemon(control, user=NOBODY)
    daemon.start()
    wait_until(lambda: control.records("start"))
    (start,) = control.records("start")
    assert (start["uid"], start["gid"], start["groups"]) == ("65534", "65534", "65534")
    pipe = daemon.layout.pipe_dir(NOBODY.uid)
    assert os.stat(pipe).st_uid == NOBODY.uid  # created by the user, so its clients can reach it
    daemon.quit(timeout_s=5)
    (command,) = control.records("command")
    assert command["uid"] == "65534"  # `quit` is sent as the daemon's user
    assert daemon.exit_code() == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root (CAP_SETUID)")
def test_a_pipe_directory_someone_else_made_is_handed_to_the_daemons_user(control):
    """A container runtime made `<root>/<uid>/pipe` root-owned as a mount point before the uid
    had a daemon: the daemon still owns its pipes once started."""
    daemon = _daemon(control, user=NOBODY)
    pipe = daemon.layout.pipe_dir(NOBODY.uid)
    pipe.mkdir(parents=True)  # root-owned, 0755
    daemon.start()
    try:
        wait_until(lambda: control.records("start"))
        owner = (os.stat(pipe).st_uid, stat.S_IMODE(os.stat(pipe).st_mode))
    finally:
        daemon.quit(timeout_s=5)
    assert owner == (NOBODY.uid, 0o700)
    assert daemon.exit_code() == 0
