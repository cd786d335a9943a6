"""Which CDI device names the node's CDI specs define (for the `cdi-cri` device-list strategy).

`nvidia-ctk cdi generate --device-name-strategy=uuid` writes specs with `kind: nvidia.com/gpu` and a
device per GPU / MIG UUID; the fully qualified name is `nvidia.com/gpu=<uuid>`. The scan is cached:
Allocate only looks names up, and re-reads the spec directories (at most once per `min_rescan_s`,
and only when a directory or file changed) when a name is missing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import yaml

logger = logging.getLogger(__name__)

CDI_KIND = "nvidia.com/gpu"
_SPEC_SUFFIXES = (".json", ".yaml", ".yml")

Signature = tuple[tuple[str, int], ...]


def cdi_name(unit_uuid: str) -> str:
    return f"{CDI_KIND}={unit_uuid}"


class CdiRegistry:
    """Cached set of fully qualified CDI device names found in `spec_dirs`."""

    def __init__(
        self,
        spec_dirs: Sequence[Path],
        *,
        clock: Callable[[], float] = time.monotonic,
        min_rescan_s: float = 1.0,
    ) -> None:
        self.spec_dirs = tuple(spec_dirs)
        self._clock = clock
        self._min_rescan_s = min_rescan_s
        self._lock = threading.Lock()
        self._signature: Signature = ()
        self._names: frozenset[str] = frozenset()
        self._scanned_at: float | None = None

    def missing(self, names: Iterable[str]) -> list[str]:
        """The names no spec defines (rescanning once if any is missing and the specs changed)."""
        wanted = list(names)
        absent = [n for n in wanted if n not in self._names]
        if absent and self._maybe_rescan():
            absent = [n for n in wanted if n not in self._names]
        return absent

    def names(self) -> frozenset[str]:
        self._maybe_rescan()
        return self._names

    def _maybe_rescan(self) -> bool:
        with self._lock:
            now = self._clock()
            if self._scanned_at is not None and now - self._scanned_at < self._min_rescan_s:
                return False
            self._scanned_at = now
            signature = _signature(self.spec_dirs)
            if signature == self._signature and self._names:
                return False
            self._signature = signature
            self._names = frozenset(n for path, _ in signature for n in _read_spec(Path(path)))
            return True


def _signature(dirs: Sequence[Path]) -> Signature:
    """(path, mtime_ns) of every spec file, so unchanged directories are not re-parsed."""
    out: list[tuple[str, int]] = []
    for directory in dirs:
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            continue
        for path in entries:
            if path.suffix in _SPEC_SUFFIXES:
                try:
                    out.append((str(path), path.stat().st_mtime_ns))
                except OSError:
                    continue
    return tuple(out)


def _read_spec(path: Path) -> list[str]:
    """Fully qualified device names of one spec file; a malformed file is logged and skipped."""
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        logger.warning("CDI spec %s is unreadable: %s", path, exc)
        return []
    if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
        logger.warning("CDI spec %s has no kind", path)
        return []
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return []
    kind = spec["kind"]
    return [f"{kind}={d['name']}" for d in devices if isinstance(d, dict) and "name" in d]
