"""The MPS status file: how `gputopo-agent mps` tells the agent's device plugin whether MPS serves.

The two run in separate DaemonSets (an agent rollout must not kill MPS clients), so the hand-off
is a small JSON file under the MPS root, replaced atomically by the supervisor at every change and
at least every `HEARTBEAT_S`:

    {"version": 1, "writtenAt": 1764190000.5, "gpus": ["GPU-..."],
     "daemons": [{"uid": 0, "up": true, "restarts": 0, "reason": ""}, ...]}

`down_reason(path, now)` is the reader: None while every daemon is up and the file is fresh, else
one line saying why the shared devices must be Unhealthy (no file: MPS is not running; a stale
file: the supervisor died without saying so; a daemon down: which user's, and why).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATUS_VERSION = 1
HEARTBEAT_S = 5.0
"""The supervisor rewrites the file at least this often."""
STALE_AFTER_S = 30.0
"""A file older than this means the supervisor is gone (it missed six heartbeats)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonStatus:
    uid: int
    up: bool
    restarts: int = 0
    reason: str = ""  # why it is down


@dataclass(frozen=True, slots=True, kw_only=True)
class MpsStatus:
    written_at: float  # wall-clock seconds: the reader is another process
    gpus: tuple[str, ...]
    daemons: tuple[DaemonStatus, ...]

    @property
    def up(self) -> bool:
        return bool(self.daemons) and all(d.up for d in self.daemons)


def encode_status(status: MpsStatus) -> str:
    daemons = [
        {"uid": d.uid, "up": d.up, "restarts": d.restarts, "reason": d.reason}
        for d in status.daemons
    ]
    doc = {
        "version": STATUS_VERSION,
        "writtenAt": status.written_at,
        "gpus": list(status.gpus),
        "daemons": daemons,
    }
    return json.dumps(doc, sort_keys=True)


def decode_status(text: str) -> MpsStatus:
    """ValueError naming the field for a file this version cannot read."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("version") != STATUS_VERSION:
        raise ValueError(f"version: expected {STATUS_VERSION}")
    try:
        return MpsStatus(
            written_at=float(doc["writtenAt"]),
            gpus=tuple(str(g) for g in doc["gpus"]),
            daemons=tuple(_daemon(d) for d in doc["daemons"]),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"missing or malformed field {exc}") from exc


def _daemon(doc: Mapping[str, Any]) -> DaemonStatus:
    return DaemonStatus(
        uid=int(doc["uid"]),
        up=bool(doc["up"]),
        restarts=int(doc["restarts"]),
        reason=str(doc["reason"]),
    )


def write_status(path: Path, status: MpsStatus) -> None:
    """Replace `path` atomically (a reader never sees half a file); readable by all."""
    fd, tmp = tempfile.mkstemp(prefix=".status-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(encode_status(status))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def down_reason(path: Path, now: float, stale_after_s: float = STALE_AFTER_S) -> str | None:
    """None while MPS serves every configured user; else why not, in one line."""
    try:
        status = decode_status(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"MPS is not running: no {path} (is the gputopo-mps DaemonSet on this node?)"
    except (OSError, ValueError) as exc:
        return f"MPS status {path} unreadable: {exc}"
    if now - status.written_at > stale_after_s:
        # no age in the text: a reason stays the same while nothing changes (the device plugin
        # re-publishes a changed reason)
        return (
            f"MPS status {path} is more than {stale_after_s:.0f}s old: "
            "the MPS supervisor stopped updating it"
        )
    down = [d for d in status.daemons if not d.up]
    if not status.daemons:
        return "MPS serves no user"
    if down:
        named = ", ".join(f"uid {d.uid} ({d.reason or 'down'})" for d in down)
        return f"MPS control daemon down for {named}"
    return None


def served_uids(path: Path) -> frozenset[int]:
    """The users MPS is configured to serve (each has a daemon of its own); empty when the
    status file is absent or unreadable (MPS is then not serving anyone)."""
    try:
        status = decode_status(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return frozenset()
    return frozenset(d.uid for d in status.daemons)
