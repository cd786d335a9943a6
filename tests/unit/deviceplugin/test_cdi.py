"""CDI spec scanning: names, malformed files, cached re-scans."""

from __future__ import annotations

import json
from pathlib import Path

from deviceplugin.cdi import CdiRegistry, cdi_name
from tests.builders.clock import FakeClock


def test_names_from_json_and_yaml_specs_and_bad_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(
        json.dumps({"kind": "nvidia.com/gpu", "devices": [{"name": "GPU-1"}, {"name": "all"}]})
    )
    (tmp_path / "b.yaml").write_text("kind: nvidia.com/gpu\ndevices:\n  - name: MIG-2\n")
    (tmp_path / "broken.yaml").write_text("kind: [unclosed\n")
    (tmp_path / "nokind.json").write_text(json.dumps({"devices": [{"name": "x"}]}))
    (tmp_path / "notes.txt").write_text("kind: nvidia.com/gpu")
    registry = CdiRegistry([tmp_path, tmp_path / "missing"], clock=FakeClock())
    assert registry.names() == {
        "nvidia.com/gpu=GPU-1",
        "nvidia.com/gpu=all",
        "nvidia.com/gpu=MIG-2",
    }
    assert cdi_name("GPU-1") == "nvidia.com/gpu=GPU-1"


def test_a_missing_name_rescans_at_most_once_per_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    registry = CdiRegistry([tmp_path], clock=clock, min_rescan_s=1.0)
    assert registry.missing(["nvidia.com/gpu=GPU-1"]) == ["nvidia.com/gpu=GPU-1"]
    (tmp_path / "a.json").write_text(
        json.dumps({"kind": "nvidia.com/gpu", "devices": [{"name": "GPU-1"}]})
    )
    assert registry.missing(["nvidia.com/gpu=GPU-1"]) == ["nvidia.com/gpu=GPU-1"]  # too soon
    clock.advance(1.0)
    assert registry.missing(["nvidia.com/gpu=GPU-1"]) == []
