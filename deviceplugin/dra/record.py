"""The node's record of prepared claims (a JSON file beside the DRA socket).

`NodePrepareResources` answers a claim found here from the record alone, so a repeated call, an
agent restart or a kubelet restart gives the same devices and CDI IDs without asking the API
server again; `NodeUnprepareResources` drops the entry. Written whole to a temporary file and
renamed, so a crash leaves the old or the new record, never half of one. An unreadable record is
logged and treated as empty (the kubelet calls prepare again, which reads the claims anew).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RECORD_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    uuid: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None
    env: tuple[str, ...] = ()  # CDI edits beyond NVIDIA_VISIBLE_DEVICES (MPS shares)
    mounts: tuple[tuple[str, str], ...] = ()  # (host path, container path)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]


def _claim_from_json(uid: str, data: Mapping[str, Any]) -> PreparedClaim:
    devices = tuple(
        PreparedDevice(
            requests=tuple(d["requests"]),
            pool=d["pool"],
            device=d["device"],
            uuid=d["uuid"],
            cdi_ids=tuple(d["cdi_ids"]),
            share_id=d.get("share_id"),
            env=tuple(d.get("env") or ()),
            mounts=tuple((str(h), str(c)) for h, c in d.get("mounts") or ()),
        )
        for d in data["devices"]
    )
    return PreparedClaim(uid=uid, namespace=data["namespace"], name=data["name"], devices=devices)


class PreparedRecord:
    """Claim UID -> `PreparedClaim`, kept in `path` (None: in memory only, for --dry-run)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._claims: dict[str, PreparedClaim] = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        if self._path is None or not self._path.exists():
            return {}
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
            if data.get("version") != RECORD_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {RECORD_VERSION}")
            return {uid: _claim_from_json(uid, c) for uid, c in data["claims"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.error(
                "prepared-claims record %s is unreadable, starting empty: %s", self._path, exc
            )
            return {}

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._claims.get(uid)

    def uids(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._claims)

    def claims(self) -> tuple[PreparedClaim, ...]:
        with self._lock:
            return tuple(self._claims.values())

    def put(self, claim: PreparedClaim) -> None:
        with self._lock:
            self._claims[claim.uid] = claim
            self._save()

    def remove(self, uid: str) -> bool:
        with self._lock:
            if self._claims.pop(uid, None) is None:
                return False
            self._save()
            return True

    def _save(self) -> None:
        if self._path is None:
            return
        claims = {}
        for uid, claim in self._claims.items():
            body = asdict(claim)
            del body["uid"]
            claims[uid] = body
        text = json.dumps({"version": RECORD_VERSION, "claims": claims}, indent=1, sort_keys=True)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_name(self._path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self._path)
