"""`gputopo-agent run --config F`, F bad: exit 2, one line on stderr naming F, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
TIME_SLICING = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"


def agent(config: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUTOPO_", "NODE_NAME"))}
    command = [
        sys.executable, "-m", "agent.cli", "run", "--oneshot", "--dry-run",
        "--nvml-fixture", "dgx-a100", "--config", str(config),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(b"version: v1\n\xff\xfe\x00binary", "{F}: not a text file (byte 0xff at "
                     "offset 12 is not UTF-8); expected YAML", id="binary file"),
        pytest.param(b"version: v1\nfoo: [1, 2\nbar: 3\n", "{F}:3:4: YAML syntax error: expected "
                     "',' or ']', but got ':' (while parsing a flow sequence at 2:6)",
                     id="YAML syntax"),
        pytest.param(TIME_SLICING.encode() + b"    - {name: nvidia.com/gpu, replicas: 10000}\n",
                     "{F}: sharing.timeSlicing.resources[0].replicas: at most 256",
                     id="10,000 replicas"),
        pytest.param(TIME_SLICING.encode() + b"    - {name: nvidia.com/gpu, replicas: 2, "
                     b"rename: 'Bad Name!'}\n", "{F}: sharing.timeSlicing.resources[0].rename: "
                     "'Bad Name!' advertises nvidia.com/Bad Name!, a name the kubelet refuses",
                     id="invalid rename"),
        pytest.param(TIME_SLICING.encode() + b"    - {name: nvidia.com/gpu, replicas: 2, "
                     b"rename: kubernetes.io/gpu}\n", "kubernetes.io/ domain is reserved",
                     id="kubernetes.io rename"),
        pytest.param(b"version: v1\nhealthQuietPeriod: .inf\n", "{F}: healthQuietPeriod: "
                     "expected a finite number of seconds", id="infinite seconds"),
        pytest.param(b"migStrategy: single\n", "{F}: version: missing (the file must say "
                     "`version: v1`)", id="no version"),
        pytest.param(b"version: v1\n- a\n", "{F}:2:1: YAML syntax error: expected <block end>, "
                     "but found '-' (while parsing a block mapping at 1:1)", id="YAML at line 2"),
    ],
)  # fmt: skip
def test_a_bad_config_file_is_one_line_naming_it(content: bytes, expected: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="cfg-", dir="/tmp"))
    config = folder / "agent.yaml"
    config.write_bytes(content)
    done = agent(config)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gputopo-agent run: invalid configuration: ")
    assert expected.format(F=config) in lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
