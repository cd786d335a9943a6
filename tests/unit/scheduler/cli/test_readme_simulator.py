"""The top-level README's simulator example: the figures it quotes are what the command prints,
and every column it explains is one the simulator prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scheduler.cli.simulate import main
from scheduler.cli.simulate_text import COLUMN_NOTES

README = Path(__file__).resolve().parents[4] / "README.md"


def _section() -> str:
    """The README's simulator example and the explanation under it."""
    text = README.read_text(encoding="utf-8")
    command = "simulate --policy gputopo,spread,bestfit,fgd --seed 42\n```\n"
    start = text.index(command) + len(command)
    return text[start : text.index("**The Alibaba GPU trace**", start)]


def test_the_columns_it_explains_are_the_simulators() -> None:
    """The numbered questions name only columns the simulator prints, the main ones among them."""
    questions = re.findall(r"^\d\. \*\*.*?(?=^\d\. |^$)", _section(), re.MULTILINE | re.DOTALL)
    named = {name for q in questions for name in re.findall(r"`([^`]+)`", q)}
    assert len(questions) == 4
    assert named >= {"gang wait s", "8-GPU max wait s", "util%", "alloc mean%", "fragmented%"}
    assert named >= {"mean wait s", "makespan s", "mean JCT s", "mean slowdown"}
    assert named - set(COLUMN_NOTES) == set()


def test_the_figures_it_quotes_are_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--policy", "gputopo,bestfit", "--seed", "42", "--json"]
    assert main(argv, environ={}) == 0
    runs = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    section = " ".join(_section().split())
    for policy in ("gputopo", "bestfit"):
        run = runs[policy]
        assert f"{run['utilisation']:.2f}" in section
        assert f"{run['allocationRatio']['mean']:.2f}" in section
        assert f"{run['gangWaitSeconds']:,.0f} s" in section
        assert f"{run['longest8GpuWaitSeconds']:,.0f} s" in section
        assert f"{run['makespanSeconds']:,.0f} s" in section


def test_what_it_says_of_spread_is_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """`spread` has the lowest mean wait and mean JCT of the four; the README says so, with the
    small pods' waits that explain it and the figures where it pays."""
    argv = ["--policy", "gputopo,spread,bestfit,fgd", "--seed", "42", "--json"]
    assert main(argv, environ={}) == 0
    runs = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    for figure in ("meanCompletionSeconds", "meanSlowdown"):
        assert min(runs, key=lambda p: runs[p][figure]) == "spread"
    assert min(runs, key=lambda p: runs[p]["waitSeconds"]["all"]["mean"]) == "spread"
    section = " ".join(_section().split())
    for policy in ("gputopo", "spread"):
        run, waits = runs[policy], runs[policy]["waitSeconds"]
        assert f"{waits['all']['mean']:,.0f}" in section
        assert f"{run['meanCompletionSeconds']:,.0f}" in section
        assert f"{run['meanSlowdown']:.2f}" in section
        assert f"{run['fragmentationOverTime']:.2f}" in section
        assert f"{waits['share']['mean']:,.0f}" in section
        assert f"{waits['1-gpu']['mean']:,.0f}" in section
        assert f"{run['gpuWeightedWaitSeconds']:,.0f}" in section
        assert f"{run['gangWaitSeconds']:,.0f}" in section
