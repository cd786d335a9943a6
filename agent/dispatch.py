"""Subcommand dispatch for the console scripts (`gputopo-agent`, `gputopo-scheduler`).

A command is a table `name -> (module, one-line help)`; each module has `main(argv) -> int` and is
imported only when its subcommand runs, so `--help` and a light subcommand never pay for a heavy
one's imports. Help goes to stdout (exit 0, or 2 with no arguments at all); an unknown name goes
to stderr with the usage (exit 2). `--version` prints `PROG VERSION` (the installed distribution's
version), as every subcommand's `--version` does. Output into a pipe closed early (`... | head`)
ends the command quietly with 141 (128 + SIGPIPE, as a shell reports it), not a traceback.

`CommandParser` is the argparse parser every command builds on: a long option must be spelled
out in full (argparse's `allow_abbrev` is off), so `--nvml-fixtur` is an error, not a silent
`--nvml-fixture`; a usage error is one line on stderr, `PROG: reason`, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

DISTRIBUTION = "gputopo"


class CommandParser(argparse.ArgumentParser):
    """An `ArgumentParser` that takes no prefix of a long option for the option and says what
    is wrong in one line (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


Subcommands = Mapping[str, tuple[str, str]]
"""Subcommand name -> (module with `main(argv) -> int`, one-line help)."""


def package_version() -> str:
    """The installed gputopo's version; "unknown" when running from a tree that is not installed.
    (`importlib.metadata` is imported here: it costs every command's start some 50 ms.)"""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def version_line(prog: str) -> str:
    return f"{prog} {package_version()}"


def usage(prog: str, table: Subcommands) -> str:
    """`usage: PROG {a,b} [--help] [--version] ...` and one line per subcommand."""
    names = ",".join(table)
    lines = "".join(f"  {name:<10} {text}\n" for name, (_, text) in table.items())
    return f"usage: {prog} {{{names}}} [--help] [--version] ...\n{lines}"


def dispatch(prog: str, table: Subcommands, usage_text: str, argv: Sequence[str]) -> int:
    """Run `table[argv[0]]`'s `main(argv[1:])`; exit 2 with a one-line reason otherwise."""
    if not argv or argv[0] in {"-h", "--help"}:
        sys.stdout.write(usage_text)
        return 0 if argv else 2
    if argv[0] == "--version":
        sys.stdout.write(version_line(prog) + "\n")
        return 0
    name, rest = argv[0], list(argv[1:])
    if name not in table:
        sys.stderr.write(f"{prog}: unknown command {name!r}\n{usage_text}")
        return 2
    module_name = table[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        sys.stderr.write(f"{prog} {name}: not available yet\n")
        return 2
    try:
        code: int = module.main(rest)
        sys.stdout.flush()
    except BrokenPipeError:
        return reader_went_away()
    return code


SIGPIPE_EXIT = 141


def reader_went_away() -> int:
    """The reader of stdout closed the pipe: point stdout at /dev/null so the interpreter's own
    flush at exit does not fail again, and exit as a shell reports SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_EXIT
