"""Each MPS user's `/dev/shm`: a sized tmpfs of its own (DESIGN §12), never a host directory.

MPS servers and their clients share memory through `/dev/shm`, so a user's daemon and that user's
share containers must see the same one. `gputopo-agent mps` mounts a tmpfs at
`<root>/<uid>/shm` per configured user (`rw,nosuid,nodev,noexec,size=<--shm-size>,mode=0700,
uid=<uid>,gid=<gid>`: only that user reads or writes it, and one DataLoader fills its own
tmpfs, not the host's /run), Allocate mounts it into that user's containers as `/dev/shm`, and
each daemon starts in a mount namespace of its own where it is bind-mounted over `/dev/shm`
(`daemon_prefix`), switching to its user only after that. NVIDIA's MPS control daemon mounts a
64 MiB tmpfs (`size=65536k`), the default here.

Mounting needs CAP_SYS_ADMIN, and the host sees the mounts only through a Bidirectional volume:
the MPS DaemonSet's container is privileged, as NVIDIA's is. `Mounter` is the seam: `HostMounter`
runs mount(8); the tests use a fake that records what it was asked.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent.mps.layout import MpsLayout, MpsUser

DEFAULT_SHM_SIZE = "64Mi"
"""As NVIDIA's MPS control daemon mounts its shm (`size=65536k`)."""
SHM_MODE = 0o700


class Mounter(Protocol):
    def is_mount(self, path: Path) -> bool: ...

    def mount_tmpfs(self, path: Path, options: str, *, remount: bool) -> None: ...

    def daemon_prefix(self, shm: Path, user: MpsUser) -> list[str] | None:
        """argv that runs the rest with `shm` as its /dev/shm, as `user`; None: the daemon
        runs as it is (its user switched by the caller)."""
        ...


def shm_options(user: MpsUser, size_bytes: int) -> str:
    """The tmpfs options of `user`'s shm."""
    return (
        f"rw,nosuid,nodev,noexec,size={size_bytes},mode={SHM_MODE:04o},"
        f"uid={user.uid},gid={user.gid}"
    )


def mount_shms(
    layout: MpsLayout, users: Sequence[MpsUser], size_bytes: int, mounter: Mounter
) -> None:
    """A tmpfs of `size_bytes` at each user's shm directory (remounted with these options when
    one is there already, so a restart keeps no stale size); OSError when one cannot be."""
    layout.root.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.root, 0o755)
    for user in users:
        path = layout.shm_dir(user.uid)
        path.mkdir(parents=True, exist_ok=True)
        mounter.mount_tmpfs(path, shm_options(user, size_bytes), remount=mounter.is_mount(path))


_BIND = 'mount --bind "$1" /dev/shm && shift 3 && exec "$@"'
_BIND_AS = (
    'mount --bind "$1" /dev/shm && uid=$2 && gid=$3 && shift 3 && '
    'exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"'
)


class HostMounter:
    """mount(8), unshare(1) and setpriv(1) from util-linux, as root with CAP_SYS_ADMIN."""

    def is_mount(self, path: Path) -> bool:
        return os.path.ismount(path)

    def mount_tmpfs(self, path: Path, options: str, *, remount: bool) -> None:
        flags = f"remount,{options}" if remount else options
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", flags, "tmpfs", str(path)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise OSError(f"mounting a tmpfs at {path} ({flags}): {done.stderr.strip()}")

    def daemon_prefix(self, shm: Path, user: MpsUser) -> list[str] | None:
        script = _BIND if user.uid == os.geteuid() else _BIND_AS
        return [
            "unshare", "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", script, "shm-bind", str(shm), str(user.uid), str(user.gid),
        ]  # fmt: skip
