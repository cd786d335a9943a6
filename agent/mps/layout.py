"""Where MPS lives on the host, and whom it serves.

Under the MPS root (default `/run/gputopo/mps`, a tmpfs on systemd hosts), per Linux user `uid`:

    <root>/<uid>/pipe   the daemon's pipe directory (`shares.mps_pipe_directory`), which Allocate
                        mounts into that user's share containers at the same path
    <root>/<uid>/log    its log directory
    <root>/<uid>/shm    that user's shared memory: a tmpfs of `--shm-size` (NVIDIA's 64 MiB by
                        default) owned by the user, mode 0700, mounted by `gputopo-agent mps`; the
                        daemon's and each of that user's clients' `/dev/shm` (Allocate mounts it),
                        so no user reads another's segments and none can fill the host's /run
    <root>/status.json  the supervisor's status (`agent.mps.status`)

Users: one control daemon serves one Linux user at a time (a real H200 showed a second user's
client waiting until the first user's clients were gone), so every user share containers run as
gets a daemon of its own. The users are configured (`--users`, a list of `UID[:GID]`, default
`0`): root serves pods without `runAsUser` whose image runs as root; list every uid your share
pods run as. A share container whose user has no daemon here is refused at Allocate, naming the
configured users (`deviceplugin.mps_env`).
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass
from pathlib import Path

from agent import shares
from agent.shares import mps_pipe_directory, mps_shm_directory

DEFAULT_MPS_ROOT = Path(shares.DEFAULT_MPS_ROOT)


@dataclass(frozen=True, slots=True, kw_only=True)
class MpsUser:
    """A Linux user served by a daemon of its own; `gid` its primary group."""

    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class MpsLayout:
    root: Path

    def user_dir(self, uid: int) -> Path:
        return self.root / str(uid)

    def pipe_dir(self, uid: int) -> Path:
        return Path(mps_pipe_directory(str(self.root), uid))

    def log_dir(self, uid: int) -> Path:
        return self.user_dir(uid) / "log"

    def shm_dir(self, uid: int) -> Path:
        return Path(mps_shm_directory(str(self.root), uid))

    @property
    def status_file(self) -> Path:
        return self.root / "status.json"

    @property
    def compute_mode_file(self) -> Path:
        """The compute modes found before the supervisor changed them (`agent.mps.computemode`)."""
        return self.root / "compute-mode.json"


def parse_users(text: str) -> tuple[MpsUser, ...]:
    """`"0,1000,2000:3000"` -> root, 1000 (its passwd group, else 1000) and 2000 with group 3000;
    sorted by uid, each once. ValueError names the bad entry, or says the list is empty."""
    users: dict[int, MpsUser] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        uid_text, _, gid_text = entry.partition(":")
        if not uid_text.isdigit() or (gid_text and not gid_text.isdigit()):
            raise ValueError(f"--users: {entry!r} is not UID or UID:GID (numbers)")
        uid = int(uid_text)
        users[uid] = MpsUser(uid=uid, gid=int(gid_text) if gid_text else primary_gid(uid))
    if not users:
        raise ValueError("--users: no user listed (give at least one UID, e.g. 0 for root)")
    return tuple(users[uid] for uid in sorted(users))


def primary_gid(uid: int) -> int:
    """The user's group from the passwd database; the uid itself when the image has no entry
    (an image's /etc/passwd rarely lists the cluster's users)."""
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid
