"""scripts/share_demo.py: the sample output the README shows is what a run of the default (time-
slicing, no `--mps`) prints, GPU UUIDs shortened as the README writes them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMMAND = ".venv/bin/python scripts/share_demo.py [--mps]"


def _readme_sample() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme.split(COMMAND, 1)[1]
    block = after.split("```text\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


def _shortened(text: str) -> list[str]:
    """`GPU-ff98eebc-...-7eb23c76ef1d` as `GPU-ff98...ef1d`."""
    return re.sub(r"GPU-(\w{4})[\w-]*(\w{4})\b", r"GPU-\1...\2", text).splitlines()


def _in_order(wanted: list[str], lines: list[str]) -> list[str]:
    """The lines of `wanted` not found in `lines` in that order (blank lines skipped)."""
    rest = iter(lines)
    return [line for line in wanted if line.strip() and line not in rest]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_readme_shows_the_output_of_the_default_run(capsys):
    spec = importlib.util.spec_from_file_location("share_demo", ROOT / "scripts" / "share_demo.py")
    assert spec is not None
    assert spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    assert demo.main([]) == 0
    sample = _readme_sample()
    assert any("sharing.timeSlicing" in line for line in sample)
    assert _in_order(sample, _shortened(capsys.readouterr().out)) == []


def test_lines_out_of_order_or_missing_are_reported():
    lines = ["a", "b GPU-ff98...ef1d", "c"]
    assert _in_order(["a", "", "c"], lines) == []
    assert _in_order(["c", "a"], lines) == ["a"]
    assert _shortened("x GPU-ff98eebc-90c9-4f0a-8cf7-7eb23c76ef1d::0") == ["x GPU-ff98...ef1d::0"]
