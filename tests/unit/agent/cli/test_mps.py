"""`gputopo-agent mps` end to end over the fake pynvml and the stand-in control daemon: the shared
GPUs' compute mode set while it serves and restored on stop, the status file, the shm directory,
and one-line refusals of bad flags."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from agent.cli.mps import main, parser, serve
from agent.mps.layout import MpsLayout, parse_users
from agent.mps.status import decode_status, down_reason
from agent.nvml import fake_structs as fs
from tests.builders.mps import StandInControl, wait_until

ME = str(os.geteuid())


def _args(control: StandInControl, *extra: str):
    return parser({}).parse_args(
        [
            f"--mps-root={control.mps_root}",
            f"--control={control.path}",
            "--metrics-address=127.0.0.1:0",
            *extra,
        ]
    )


def _serve_until_up(control, backend, args, users: str, seen: dict) -> int:
    """Run `serve` until MPS is up, note what the node looked like then, and stop it."""
    layout, stop = MpsLayout(control.mps_root), threading.Event()

    def watch() -> None:
        try:
            # Up, and each user's stand-in has recorded its start (a child process under load
            # may be running before its first line has run).
            wait_until(
                lambda: (
                    down_reason(layout.status_file, time.time()) is None
                    and len(control.records("start")) >= len(parse_users(users))
                )
            )
            seen["status"] = decode_status(layout.status_file.read_text(encoding="utf-8"))
            seen["modes"] = dict(backend.nvml.compute_modes)
            seen["shm"] = stat.S_IMODE(os.stat(layout.shm_dir).st_mode)
        finally:
            stop.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    code = serve(args, parse_users(users), backend, None, stop)
    watcher.join()
    return code


def test_one_user_holds_the_shared_gpus_exclusive_while_serving_and_restores_them(
    control, backend_for
):
    backend, fake = backend_for("dgx-a100")
    seen: dict = {}
    code = _serve_until_up(control, backend, _args(control, "--gpus=0,1"), ME, seen)
    ep, default = fs.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, fs.NVML_COMPUTEMODE_DEFAULT
    assert code == 0
    assert [seen["modes"][i] for i in range(3)] == [ep, ep, default]
    assert set(fake.compute_modes.values()) == {default}  # restored on stop
    uuids = [str(g.uuid) for g in backend.gpus()[:2]]
    assert seen["status"].gpus == tuple(uuids)
    (start,) = control.records("start")
    assert start["visible"] == ",".join(uuids)  # only the shared GPUs reach the MPS server
    assert seen["shm"] == 0o1777
    assert [c["command"] for c in control.records("command")] == ["quit"]
    assert "stopped" in (down_reason(MpsLayout(control.mps_root).status_file, time.time()) or "")


def test_several_users_leave_the_gpus_in_default(control, backend_for):
    if os.geteuid() != 0:
        pytest.skip("a second user's daemon needs root (CAP_SETUID)")
    backend, fake = backend_for("single-t4")
    fake.compute_modes[0] = fs.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    seen: dict = {}
    assert _serve_until_up(control, backend, _args(control), "0,65534", seen) == 0
    assert seen["modes"] == {0: fs.NVML_COMPUTEMODE_DEFAULT}
    assert [d.uid for d in seen["status"].daemons] == [0, 65534]
    assert control.records("start")[0]["visible"] == "unset"  # every GPU shared
    assert fake.compute_modes == {0: fs.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS}  # put back


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        pytest.param(["--users=alice"], 2, "--users: 'alice' is not UID", id="bad user"),
        pytest.param(["--gpus=7"], 1, "--gpus: no GPU '7' on this node", id="unknown GPU"),
    ],
)
def test_bad_flags_are_refused_in_one_line(control, capsys, argv, code, message):
    argv = [*argv, "--nvml-fixture=single-t4", f"--mps-root={control.mps_root}"]
    assert main(argv, environ={}) == code
    err = capsys.readouterr().err
    assert err.startswith("gputopo-agent mps: ")
    assert err.count("\n") == 1
    assert message in err
