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
from agent.mps.layout import MpsLayout, MpsUser, parse_users
from agent.mps.shm import HostMounter
from agent.mps.status import decode_status, down_reason
from agent.nvml import fake_structs as fs
from tests.builders.mps import FakeMounter, StandInControl, wait_until

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


def _serve_until_up(control, backend, args, users: str, seen: dict, mounter=None) -> int:
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
            seen["shm"] = {
                u.uid: stat.S_IMODE(os.stat(layout.shm_dir(u.uid)).st_mode)
                for u in parse_users(users)
            }
        finally:
            stop.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    code = serve(args, parse_users(users), backend, None, stop, mounter)
    watcher.join()
    return code


def test_one_user_holds_the_shared_gpus_exclusive_while_serving_and_restores_them(
    control, backend_for
):
    backend, fake = backend_for("dgx-a100")
    seen: dict = {}
    mounter = FakeMounter()
    code = _serve_until_up(control, backend, _args(control, "--gpus=0,1"), ME, seen, mounter)
    ep, default = fs.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, fs.NVML_COMPUTEMODE_DEFAULT
    assert code == 0
    assert [seen["modes"][i] for i in range(3)] == [ep, ep, default]
    assert set(fake.compute_modes.values()) == {default}  # restored on stop
    uuids = [str(g.uuid) for g in backend.gpus()[:2]]
    assert seen["status"].gpus == tuple(uuids)
    (start,) = control.records("start")
    assert start["visible"] == ",".join(uuids)  # only the shared GPUs reach the MPS server
    assert seen["shm"] == {int(ME): 0o700}
    assert [c["command"] for c in control.records("command")] == ["quit"]
    assert "stopped" in (down_reason(MpsLayout(control.mps_root).status_file, time.time()) or "")


def test_several_users_leave_the_gpus_in_default(control, backend_for):
    if os.geteuid() != 0:
        pytest.skip("a second user's daemon needs root (CAP_SETUID)")
    backend, fake = backend_for("single-t4")
    fake.compute_modes[0] = fs.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    seen: dict = {}
    assert _serve_until_up(control, backend, _args(control), "0,65534", seen, FakeMounter()) == 0
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


def test_each_user_gets_a_sized_tmpfs_of_its_own_never_a_shared_host_directory(
    control, backend_for
):
    """NVIDIA's 64 MiB by default, or `--shm-size`; mode 0700 and owned by the user; a tmpfs
    already there (a restart) is remounted with these options."""
    backend, _ = backend_for("single-t4")
    mounter, layout = FakeMounter(), MpsLayout(control.mps_root)
    shm = layout.shm_dir(int(ME))
    assert _serve_until_up(control, backend, _args(control), ME, {}, mounter) == 0
    gid = os.getegid() if int(ME) == 0 else int(ME)
    assert mounter.mounts == {
        shm: f"rw,nosuid,nodev,noexec,size={64 * 1024**2},mode=0700,uid={ME},gid={gid}"
    }
    args = _args(control, "--shm-size=1Gi")
    assert _serve_until_up(control, backend, args, ME, {}, mounter) == 0
    assert mounter.remounts == [shm]
    assert f"size={1024**3}," in mounter.mounts[shm]
    assert not (layout.root / "shm").exists()  # no host directory every user shares


def test_a_daemon_starts_in_its_own_mount_namespace_with_its_users_shm_as_dev_shm(tmp_path):
    """What `HostMounter` runs before the daemon (checked here as argv; a real node runs it)."""
    user = MpsUser(uid=1000, gid=1000)
    prefix = HostMounter().daemon_prefix(tmp_path / "1000" / "shm", user)
    assert prefix is not None
    assert prefix[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    script = prefix[prefix.index("-c") + 1]
    assert script.startswith('mount --bind "$1" /dev/shm && ')
    assert 'setpriv --reuid="$uid" --regid="$gid" --clear-groups' in script
    assert prefix[-3:] == [str(tmp_path / "1000" / "shm"), "1000", "1000"]
