"""What the agent gave each share container (DESIGN §12 "Trust"): `ShareRecord`, a root-only
JSON file on the node.

Allocate writes one `GivenShare` per share container it answers (before the answer leaves), so
a re-allocation after a kubelet or node restart gets the same GPU and size, and the NRT's share
accounting counts what was given. Nothing here is read from the pod: a pod's author can write
its annotations, not this file (mode 0600 in a 0700 directory, written by rename).

The file is JSON `{"version": 1, "given": [{...GivenShare...}, ...]}`. Entries are dropped
with `keep(uids, keys)` once neither the API nor the kubelet lists their pod on the node. A
missing file is an empty record; an unreadable one is logged and read as empty (the next write
replaces it).

Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping, Set
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.model import GpuUuid

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_SHARE_RECORD", "GivenShare", "ShareRecord"]

DEFAULT_SHARE_RECORD = "/var/lib/gputopo/shares.json"
"""On the host (not /run: the record must outlive a node restart, whose pods the kubelet
re-admits with the replica IDs it checkpointed)."""
VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class GivenShare:
    """One share container's answer: its replica IDs of `resource`, the GPU it was given, and
    its size (`memory_bytes` None: an equal split of the GPU per replica; `compute_percent`
    None: no compute limit). `how`: `lock` (the share Lease's) or `unplaced` (another
    scheduler's pod: always an equal split)."""

    pod: str  # namespace/name
    uid: str
    container: str
    init: bool
    resource: str
    ids: tuple[str, ...]
    gpu: GpuUuid
    replicas: int = 1
    memory_bytes: int | None = None
    compute_percent: int | None = None
    how: str = "lock"


def _given(raw: Mapping[str, Any]) -> GivenShare:
    return GivenShare(
        pod=str(raw["pod"]),
        uid=str(raw["uid"]),
        container=str(raw["container"]),
        init=bool(raw["init"]),
        resource=str(raw["resource"]),
        ids=tuple(str(i) for i in raw["ids"]),
        gpu=GpuUuid(str(raw["gpu"])),
        replicas=int(raw.get("replicas", 1)),
        memory_bytes=None if raw.get("memory_bytes") is None else int(raw["memory_bytes"]),
        compute_percent=None if raw.get("compute_percent") is None else int(raw["compute_percent"]),
        how=str(raw.get("how", "lock")),
    )


class ShareRecord:
    """The record at `path` (None: kept in memory only, as with `--dry-run`); thread-safe."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._mutex = threading.Lock()
        self._by_uid: dict[str, dict[str, GivenShare]] = {}  # pod UID -> container -> share
        self._by_key: dict[tuple[str, str], GivenShare] = {}  # (pod key, container) -> newest
        for share in self._read():
            self._put(share)

    def _read(self) -> list[GivenShare]:
        if self._path is None or not self._path.exists():
            return []
        try:
            doc = json.loads(self._path.read_text(encoding="utf-8"))
            if doc.get("version") != VERSION:
                raise ValueError(f"version {doc.get('version')!r}, expected {VERSION}")
            return [_given(raw) for raw in doc["given"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("share record %s unreadable, starting empty: %s", self._path, exc)
            return []

    def _put(self, share: GivenShare) -> None:
        self._by_uid.setdefault(share.uid, {})[share.container] = share
        self._by_key[(share.pod, share.container)] = share

    def all(self) -> tuple[GivenShare, ...]:
        with self._mutex:
            return tuple(s for shares in self._by_uid.values() for s in shares.values())

    def of_pod(self, uid: str) -> dict[str, GivenShare]:
        """The pod's recorded share containers, by container name."""
        with self._mutex:
            return dict(self._by_uid.get(uid, {}))

    def find(self, pod: str, container: str) -> GivenShare | None:
        """The share recorded last for container `container` of pod `pod` (namespace/name)."""
        with self._mutex:
            return self._by_key.get((pod, container))

    def add(self, share: GivenShare) -> None:
        """Record `share` (replacing the container's earlier answer) and write the file."""
        with self._mutex:
            self._put(share)
            self._write()

    def keep(self, uids: Set[str], keys: Set[str]) -> int:
        """Forget the shares of pods neither in `uids` (the API's pods on the node) nor in `keys`
        (namespace/name of the pods the kubelet lists); how many pods were forgotten."""
        with self._mutex:
            gone = [
                uid
                for uid, shares in self._by_uid.items()
                if uid not in uids and not any(s.pod in keys for s in shares.values())
            ]
            for uid in gone:
                for share in self._by_uid.pop(uid).values():
                    if self._by_key.get((share.pod, share.container)) is share:
                        del self._by_key[(share.pod, share.container)]
            if gone:
                self._write()
            return len(gone)

    def _write(self) -> None:
        if self._path is None:
            return
        given = [_encoded(s) for shares in self._by_uid.values() for s in shares.values()]
        doc = {"version": VERSION, "given": given}
        folder = self._path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".shares-", dir=folder)  # created 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(doc, out, separators=(",", ":"))
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self._path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def _encoded(share: GivenShare) -> dict[str, Any]:
    raw = asdict(share)
    raw["ids"] = list(share.ids)
    return raw


def pod_uids(pods: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The UIDs of API pod objects (for `ShareRecord.keep`)."""
    return frozenset(str((p.get("metadata") or {}).get("uid") or "") for p in pods) - {""}
