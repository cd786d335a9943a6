"""The shared GPUs' compute mode while MPS serves them, and putting it back afterwards.

EXCLUSIVE_PROCESS lets one process hold a GPU: under MPS that is the MPS server, so no client can
bypass MPS (and its limits) by opening the GPU directly; NVIDIA's MPS sharing sets it too. But
it also means one MPS server per GPU, so two users' daemons (two servers) cannot share an
EXCLUSIVE_PROCESS GPU. Hence `wanted_mode`:

- one user served, exclusive on (the default): EXCLUSIVE_PROCESS;
- several users, exclusive on: DEFAULT (said once in the log), so every user's server can run;
- exclusive off (`--exclusive-process=off`): the compute mode is left as it is found.

What each GPU was set to before is recorded in a file under the MPS root before it is changed,
so a supervisor killed without cleaning up is followed by one that still restores the original
mode, never the mode its predecessor set. An NVML failure (NoPermission outside a privileged
container, NotSupported) is returned as a one-line problem; MPS runs on without it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from agent import logkeys
from agent.errors import NvmlError
from agent.model import GpuUuid
from agent.nvml.backend import ComputeMode

log = logging.getLogger(__name__)


class ComputeModeGpus(Protocol):
    """The NVML calls this needs (`PynvmlBackend` has them)."""

    def compute_mode(self, uuid: GpuUuid) -> ComputeMode: ...

    def set_compute_mode(self, uuid: GpuUuid, mode: ComputeMode) -> None: ...


def wanted_mode(*, users: int, exclusive_process: bool) -> ComputeMode | None:
    """The mode to hold the shared GPUs in; None to leave them alone."""
    if not exclusive_process:
        return None
    return ComputeMode.EXCLUSIVE_PROCESS if users == 1 else ComputeMode.DEFAULT


class ComputeModeKeeper:
    """Sets `wanted` on `uuids` (`apply`) and puts back what was there (`restore`)."""

    def __init__(
        self,
        gpus: ComputeModeGpus,
        uuids: Sequence[GpuUuid],
        record: Path,
        wanted: ComputeMode | None,
    ) -> None:
        self.gpus, self.uuids, self.record, self.wanted = gpus, tuple(uuids), record, wanted

    def apply(self) -> list[str]:
        """Set the wanted mode where it differs; the problems, one line each."""
        if self.wanted is None:
            return []
        originals = self._recorded()
        problems: list[str] = []
        for uuid in self.uuids:
            try:
                current = self.gpus.compute_mode(uuid)
            except NvmlError as exc:
                problems.append(f"GPU {uuid}: cannot read its compute mode: {exc}")
                continue
            originals.setdefault(uuid, current)
            self._save(originals)
            if current is not self.wanted:
                problems += self._set(uuid, self.wanted)
        return problems

    def restore(self) -> list[str]:
        """Put back every recorded mode; the record is removed once all are back."""
        problems: list[str] = []
        for uuid, mode in self._recorded().items():
            problems += self._set(uuid, mode)
        if not problems:
            self.record.unlink(missing_ok=True)
        return problems

    def _set(self, uuid: GpuUuid, mode: ComputeMode) -> list[str]:
        try:
            if self.gpus.compute_mode(uuid) is not mode:
                self.gpus.set_compute_mode(uuid, mode)
                log.info("GPU %s: compute mode %s", uuid, mode, extra={logkeys.GPU_UUID: uuid})
        except NvmlError as exc:
            return [f"GPU {uuid}: cannot set compute mode {mode}: {exc}"]
        return []

    def _recorded(self) -> dict[GpuUuid, ComputeMode]:
        try:
            doc = json.loads(self.record.read_text(encoding="utf-8"))
            return {GpuUuid(uuid): ComputeMode(mode) for uuid, mode in doc.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, AttributeError) as exc:
            log.warning(
                "ignoring unreadable %s (%s): modes found now count as original", self.record, exc
            )
            return {}

    def _save(self, originals: dict[GpuUuid, ComputeMode]) -> None:
        text = json.dumps({str(u): m.value for u, m in originals.items()}, sort_keys=True)
        self.record.write_text(text, encoding="utf-8")
