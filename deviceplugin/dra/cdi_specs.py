"""One CDI spec per prepared claim, in the runtime's dynamic spec directory (`/var/run/cdi`).

Kind `k8s.gputopo.io/claim`, one device per allocated device named `<claim UID>-<device>`. Each
device's edits set `NVIDIA_VISIBLE_DEVICES` to the UUIDs of all the claim's devices (the same value
in each, so the runtime's merge of a claim's devices keeps them all), as the device plugin's
Allocate does for its containers, then the device's own (an MPS share's limits, pipe and
`/dev/shm`, `deviceplugin.dra.mps_edits`). Written to a temporary file and renamed: the runtime
never reads half a spec.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.dra.devices import VISIBLE_DEVICES
from deviceplugin.dra.record import PreparedDevice
from deviceplugin.dra.wire import CDI_KIND, CDI_VERSION, cdi_device_name, cdi_spec_file

MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "bind")


def _edits(visible: str, device: PreparedDevice) -> dict[str, Any]:
    edits: dict[str, Any] = {"env": [visible, *device.env]}
    if device.mounts:
        edits["mounts"] = [
            {"hostPath": host, "containerPath": path, "options": list(MOUNT_OPTIONS)}
            for host, path in device.mounts
        ]
    return edits


def claim_spec(claim_uid: str, devices: Sequence[PreparedDevice]) -> dict[str, object]:
    """The spec of a claim whose prepared devices are `devices`."""
    visible = f"{VISIBLE_DEVICES}={','.join(d.uuid for d in devices)}"
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {"name": cdi_device_name(claim_uid, d.device), "containerEdits": _edits(visible, d)}
            for d in devices
        ],
    }


class CdiSpecDir:
    """Writes and removes the claim specs in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, claim_uid: str) -> Path:
        return self.directory / cdi_spec_file(claim_uid)

    def write(self, claim_uid: str, devices: Sequence[PreparedDevice]) -> Path:
        path = self.path(claim_uid)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(claim_spec(claim_uid, devices), indent=1), encoding="utf-8")
        os.replace(tmp, path)
        return path

    def remove(self, claim_uid: str) -> None:
        self.path(claim_uid).unlink(missing_ok=True)
