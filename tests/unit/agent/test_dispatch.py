"""Subcommand dispatch shared by the console scripts: help, unknown names, missing modules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.dispatch import CommandParser, dispatch, package_version, usage

TABLE = {
    "inventory": ("agent.cli.inventory", "print the GPUs"),
    "later": ("agent.cli.not_written_yet", "a subcommand whose module does not exist"),
}
USAGE = usage("tool", TABLE)


def test_usage_lists_every_subcommand() -> None:
    assert USAGE == (
        "usage: tool {inventory,later} [--help] [--version] ...\n"
        "  inventory  print the GPUs\n"
        "  later      a subcommand whose module does not exist\n"
    )


@pytest.mark.parametrize(
    ("argv", "code"),
    [pytest.param(["--help"], 0, id="--help"), pytest.param([], 2, id="no arguments")],
)
def test_help_goes_to_stdout(argv, code, capsys) -> None:
    assert dispatch("tool", TABLE, USAGE, argv) == code
    assert capsys.readouterr().out == USAGE


def test_unknown_command_is_one_line_and_the_usage(capsys) -> None:
    assert dispatch("tool", TABLE, USAGE, ["nope"]) == 2
    assert capsys.readouterr().err == f"tool: unknown command 'nope'\n{USAGE}"


def test_missing_module_says_not_available(capsys) -> None:
    assert dispatch("tool", TABLE, USAGE, ["later", "--x"]) == 2
    assert capsys.readouterr().err == "tool later: not available yet\n"


def test_version_is_one_line_on_stdout(capsys) -> None:
    assert dispatch("tool", TABLE, USAGE, ["--version"]) == 0
    assert capsys.readouterr().out == f"tool {package_version()}\n"
    assert package_version() not in {"", "0.0.0"}


def test_a_command_parser_refuses_a_prefix_of_a_flag_in_one_line(capsys) -> None:
    parser = CommandParser(prog="tool sub")
    parser.add_argument("--nvml-fixture")
    parser.add_argument("-o", "--output")
    assert parser.parse_args(["--nvml-fixture=a", "-ob"]).output == "b"
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--nvml-fixtur", "a"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "tool sub: unrecognized arguments: --nvml-fixtur a\n"


def test_every_shipped_parser_is_a_command_parser() -> None:
    """A plain ArgumentParser would take `--nvml-fixtur` for `--nvml-fixture` again."""
    root = Path(__file__).resolve().parents[3]
    plain = [
        f"{path.relative_to(root)}:{number}"
        for package in ("agent", "deviceplugin", "scheduler")
        for path in sorted((root / package).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bArgumentParser\(", line) and path.name != "dispatch.py"
    ]
    assert plain == []
