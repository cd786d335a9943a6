"""`gputopo-scheduler simulate` and `demo` as processes: `--plot` refused before any run (one line,
exit 2), `--version`, help with defaults and nothing outside the repository, and output into a
pipe that closes early (`| head`) without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.dispatch import package_version

ROOT = Path(__file__).resolve().parents[4]
SIMULATE = [sys.executable, "-m", "scheduler.cli", "simulate"]
# matplotlib made unimportable, as on a machine without the `plot` extra
NO_MATPLOTLIB = textwrap.dedent(
    """
    import runpy, sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "matplotlib" or name.startswith("matplotlib."):
                raise ModuleNotFoundError(name)
            return None
    sys.meta_path.insert(0, Block())
    sys.argv = ["gputopo-scheduler", *sys.argv[1:]]
    runpy.run_module("scheduler.cli", run_name="__main__")
    """
)


def run(argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_")}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def assert_one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""  # refused before the first run


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        pytest.param("missing-dir/out.png", "directory missing-dir does not exist", id="dir"),
        pytest.param("out.gif", "unknown plot format '.gif'", id="extension"),
        pytest.param("out", "unknown plot format '(no extension)'", id="no-extension"),
    ],
)
def test_a_plot_that_cannot_be_written_is_refused_before_running(
    tmp_path: Path, target: str, expected: str
) -> None:
    done = run([*SIMULATE, "--policy", "random", "--plot", target], cwd=tmp_path)
    assert_one_line(done, f"gputopo-scheduler simulate: --plot: {target}: {expected}")


def test_without_matplotlib_plot_names_the_extra(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", NO_MATPLOTLIB, "simulate", "--plot", str(tmp_path / "a.png")]
    done = run(argv)
    assert_one_line(done, "matplotlib is not installed: pip install -e '.[plot]'")
    assert not (tmp_path / "a.png").exists()


def test_a_reader_that_goes_away_ends_the_demo_quietly() -> None:
    """`gputopo-scheduler demo | head -1`: the demo keeps writing after head has gone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_")}
    argv = [sys.executable, "-m", "scheduler.cli", "demo", "--skip-node"]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env
    ) as demo:
        assert demo.stdout is not None
        assert demo.stderr is not None
        demo.stdout.readline()
        demo.stdout.close()  # as `head -1` does
        stderr = demo.stderr.read().decode()
        code = demo.wait(timeout=120)
    assert "Traceback" not in stderr
    assert "BrokenPipe" not in stderr
    assert code == 141  # 128 + SIGPIPE, as a shell reports a command cut short by a pipe


@pytest.mark.parametrize("command", ["simulate", "demo"])
def test_version_and_help(command: str) -> None:
    prog = f"gputopo-scheduler {command}"
    done = run([sys.executable, "-m", "scheduler.cli", command, "--version"])
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{prog} {package_version()}\n", "")
    done = run([sys.executable, "-m", "scheduler.cli", command, "--help"])
    assert done.returncode == 0
    assert done.stdout.startswith(f"usage: {prog} ")
    assert "DESIGN" not in done.stdout
    assert "§" not in done.stdout
    assert "(default: " in done.stdout
