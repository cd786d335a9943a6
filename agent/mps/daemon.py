"""One `nvidia-cuda-mps-control -f` per Linux user, as a real child process.

`start()` runs the control daemon in the foreground (`-f`), so the supervisor sees it exit, with
`CUDA_MPS_PIPE_DIRECTORY` and `CUDA_MPS_LOG_DIRECTORY` set to the user's directories and, when
only some GPUs are shared, `CUDA_VISIBLE_DEVICES` naming them (the MPS server inherits it). A
user other than the supervisor's own is switched to in the child (setgid, no supplementary groups,
setuid: the CAP_SETUID/CAP_SETGID the DaemonSet grants). The child first creates its pipe and log
directories as that user (mode 0700), so only that user's clients can reach the daemon; the
supervisor, holding no CAP_CHOWN, could not hand them over itself.

With a `prefix` (`agent.mps.shm`), the child first enters a mount namespace of its own where the
user's sized tmpfs is `/dev/shm`, and the prefix switches to the user after that.

`quit()` writes `quit` to the daemon's control pipe as NVIDIA's tools do
(`echo quit | nvidia-cuda-mps-control`, same environment, same user), waits for the daemon to
exit, and only then signals it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from agent.mps.layout import MpsLayout, MpsUser

log = logging.getLogger(__name__)

CONTROL_BINARY = "nvidia-cuda-mps-control"
PASSED_ENV = ("PATH", "LD_LIBRARY_PATH")
"""What the daemon inherits from the supervisor's environment; nothing else leaks into it."""
QUIT_TIMEOUT_S = 10.0
SIGNAL_TIMEOUT_S = 3.0
_START = (
    'umask 077 && mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY" && exec "$0" -f'
)


class ControlDaemon:
    """The control daemon serving `user`; not started until `start()`."""

    def __init__(
        self,
        *,
        user: MpsUser,
        layout: MpsLayout,
        control: str = CONTROL_BINARY,
        visible_gpus: Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
        prefix: Sequence[str] | None = None,
    ) -> None:
        """`prefix`: argv that runs the daemon with its user's shm as /dev/shm and switches to
        the user (`agent.mps.shm.Mounter.daemon_prefix`); None: started as the user directly."""
        self.user, self.layout, self.control = user, layout, control
        self._prefix = None if prefix is None else list(prefix)
        self._visible = None if visible_gpus is None else tuple(visible_gpus)
        self._environ = os.environ if environ is None else environ
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def uid(self) -> int:
        return self.user.uid

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def env(self) -> dict[str, str]:
        """The daemon's whole environment (and that of every command sent to it)."""
        env = {k: self._environ[k] for k in PASSED_ENV if k in self._environ}
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(self.layout.pipe_dir(self.uid))
        env["CUDA_MPS_LOG_DIRECTORY"] = str(self.layout.log_dir(self.uid))
        if self._visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self._visible)
        return env

    def start(self) -> None:
        """Start the daemon; OSError when the child cannot be started at all."""
        self._prepare_user_dir()
        argv = ["/bin/sh", "-c", _START, self.control]
        self._process = subprocess.Popen(
            argv if self._prefix is None else [*self._prefix, *argv],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the supervisor's group does not reach it
            **(self._as_user() if self._prefix is None else {}),
        )
        log.info("MPS control daemon for uid %d started (pid %d)", self.uid, self._process.pid)

    def exit_code(self) -> int | None:
        """None while it runs; its exit status once it has exited (or was never started: -1)."""
        if self._process is None:
            return -1
        return self._process.poll()

    def send(self, command: str, timeout_s: float = QUIT_TIMEOUT_S) -> str:
        """Write one command to the control pipe (`echo CMD | nvidia-cuda-mps-control`)."""
        done: subprocess.CompletedProcess[bytes] = subprocess.run(
            [self.control],
            input=f"{command}\n".encode(),
            capture_output=True,
            env=self.env(),
            timeout=timeout_s,
            check=True,
            **self._as_user(),
        )
        return done.stdout.decode(errors="replace")

    def quit(self, timeout_s: float = QUIT_TIMEOUT_S) -> None:
        """Stop the daemon (and with it the MPS server it started); returns once it has exited."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        try:
            self.send("quit", timeout_s)
            process.wait(timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning(
                "MPS control daemon for uid %d did not quit (%s); signalling", self.uid, exc
            )
            self._signal(process)
        else:
            log.info("MPS control daemon for uid %d quit", self.uid)

    def _signal(self, process: subprocess.Popen[bytes]) -> None:
        process.terminate()
        try:
            process.wait(SIGNAL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _prepare_user_dir(self) -> None:
        """`<root>/<uid>`: the child, running as the user, creates its directories inside. A
        pipe or log directory someone else made there (a container runtime creating a mount
        point for a uid with no daemon yet) is handed to the user, or its daemon could never
        open its pipes."""
        path = self.layout.user_dir(self.uid)
        path.mkdir(parents=True, exist_ok=True)
        if self.uid == os.geteuid():
            return
        os.chmod(path, 0o1733)  # others may create entries, never list or remove them
        for made in (self.layout.pipe_dir(self.uid), self.layout.log_dir(self.uid)):
            if made.is_dir() and made.stat().st_uid != self.uid:
                os.chown(made, self.uid, self.user.gid)
                os.chmod(made, 0o700)
                log.warning("%s was not owned by uid %d: handed to it", made, self.uid)

    def _as_user(self) -> dict[str, Any]:
        """Popen arguments that switch the child to the user; none when it is ours already."""
        if self.uid == os.geteuid():
            return {}
        return {"user": self.uid, "group": self.user.gid, "extra_groups": []}
