"""`gputopo-scheduler simulate` and the demo as a user runs them: `--plot` refused before the run in
one line, a reader that leaves early (`| head`), `--help` with every default and choice."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_")}
    return {**env, **extra}


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env or _env(),
    )


def _no_matplotlib() -> dict[str, str]:
    """An environment where `import matplotlib` fails, as in an install without the plot extra."""
    shim = Path(tempfile.mkdtemp(prefix="no-mpl-", dir="/tmp")) / "matplotlib"
    shim.mkdir()
    (shim / "__init__.py").write_text('raise ImportError("No module named matplotlib")\n', "utf-8")
    return _env(PYTHONPATH=str(shim.parent))


@pytest.mark.parametrize(
    ("plot", "no_mpl", "message"),
    [
        pytest.param(
            "alloc.png", True, "--plot needs matplotlib: pip install 'gputopo[plot]'", id="no mpl"
        ),
        pytest.param("missing/alloc.png", False, "no such directory", id="missing directory"),
        pytest.param("alloc.jpg", False, "unknown extension '.jpg'", id="unknown extension"),
    ],
)
def test_a_plot_that_cannot_be_written_is_one_line_before_the_run(
    plot: str, no_mpl: bool, message: str
):
    folder = Path(tempfile.mkdtemp(prefix="plot-", dir="/tmp"))
    argv = ["-m", "scheduler.cli", "simulate", "--policy", "random", "--plot", str(folder / plot)]
    done = run(*argv, env=_no_matplotlib() if no_mpl else None)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gputopo-scheduler simulate: ")
    assert message in lines[0]
    assert done.stdout == ""  # refused before anything ran
    assert not list(folder.iterdir())


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["-m", "scheduler.cli", "simulate", "--policy", "gputopo"], id="simulate"),
        pytest.param(["-m", "scheduler.cli.demo", "--skip-node"], id="demo"),
    ],
)
def test_a_reader_that_leaves_early_ends_the_command_quietly(argv: list[str]):
    with subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=_env(),
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # `| head` that read nothing and left
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err
    assert err == ""
    assert code == 141


def _options(help_text: str) -> dict[str, str]:
    """Each option's help, joined over its lines."""
    found: dict[str, str] = {}
    current = ""
    for line in help_text.split("options:")[1].splitlines():
        match = re.match(r"\s{2}(-[-\w]+)", line)
        if match:
            current = match.group(1)
            found[current] = line
        elif current:
            found[current] += " " + line.strip()
    return found


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        pytest.param(
            ["-m", "scheduler.cli", "simulate"], "usage: gputopo-scheduler simulate", id="simulate"
        ),
        pytest.param(["-m", "scheduler.cli.demo"], "usage: bash scripts/demo.sh", id="demo"),
    ],
)
def test_help_shows_every_default_and_names_only_what_is_in_the_repository(
    argv: list[str], usage: str
):
    done = run(*argv, "--help")
    assert done.returncode == 0
    assert done.stdout.startswith(usage)
    options = {k: v for k, v in _options(done.stdout).items() if k != "-h"}
    assert options
    assert [k for k, v in options.items() if "default" not in v] == []
    assert "DESIGN" not in done.stdout
    assert "§" not in done.stdout
