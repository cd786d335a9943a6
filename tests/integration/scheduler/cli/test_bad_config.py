"""`gputopo-scheduler simulate|run --config F`, F bad: exit 2, one line naming F and the key."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


def scheduler(command: str, config: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_")}
    argv = [sys.executable, "-m", "scheduler.cli", command, "--config", str(config)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


@pytest.mark.parametrize("command", ["simulate", "run"])
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(b"version: v1\n\xff\xfe\x00binary", "{F}: not a text file (byte 0xff at "
                     "offset 12 is not UTF-8); expected YAML", id="binary file"),
        pytest.param(b"version: v1\ngang: {scheduleTimeoutSeconds: 1\nscoring: {}\n",
                     "{F}:3:8: YAML syntax error: expected ',' or '}}', but got ':' (while "
                     "parsing a flow mapping at 2:7)", id="YAML syntax"),
        pytest.param(b"version: v1\nscoring: {weights: {fragmentation: .nan}}\n",
                     "{F}: invalid scheduler config: scoring.weights.fragmentation: must be a "
                     "finite number >= 0, got nan", id="NaN weight"),
        pytest.param(b"version: v1\nscoring: {weights: {topology: .inf}}\n",
                     "{F}: invalid scheduler config: scoring.weights.topology: must be a finite "
                     "number >= 0, got inf",
                     id="infinite weight"),
        pytest.param(b"version: v1\ngang: {scheduleTimeoutSeconds: .inf}\n",
                     "{F}: invalid scheduler config: gang.scheduleTimeoutSeconds: must be a "
                     "finite number > 0, got inf", id="infinite timeout"),
    ],
)  # fmt: skip
def test_a_bad_config_file_is_one_line_naming_it(command: str, content: bytes, expected: str):
    folder = Path(tempfile.mkdtemp(prefix="cfg-", dir="/tmp"))
    config = folder / "scheduler.yaml"
    config.write_bytes(content)
    done = scheduler(command, config)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0] == f"gputopo-scheduler {command}: " + expected.format(F=config)
    assert "Traceback" not in done.stderr
