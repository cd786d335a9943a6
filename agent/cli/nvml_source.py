"""What the one-shot agent commands (`inventory`, `record`) share: the flags that choose where
NVML answers from, opening that source, and the one line printed for an error they expect."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from agent import logsetup
from agent.dispatch import CommandParser, version_line
from agent.errors import AgentError, NvmlUnavailable
from agent.inventory import load_inventory
from agent.model import NodeInventory
from agent.nvml.fixture import builtin_names
from agent.precedence import Setting, env_var, first_value, from_env


def source_parser(
    prog: str, description: str | None, environ: Mapping[str, str] | None = None
) -> argparse.ArgumentParser:
    """A parser with `--nvml-fixture`, `--host-root` and `--log-format` (defaults from
    GPUTOPO_<FLAG> in `environ`, the process environment when None)."""
    variables = os.environ if environ is None else environ

    def env(flag: str) -> Setting | None:
        """GPUTOPO_<FLAG>, the flag's default; one set to "" counts as unset."""
        return from_env(variables, env_var(flag), blank_is_unset=True)

    parser = CommandParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=version_line(prog))
    parser.add_argument(
        "--nvml-fixture",
        metavar="NAME|PATH",
        default=first_value(env("--nvml-fixture")),
        help="answer from a fake NVML fixture instead of the driver "
        f"(default: the driver; built-in: {', '.join(builtin_names())})",
    )
    parser.add_argument(
        "--host-root",
        metavar="PATH",
        type=Path,
        default=Path(first_value(env("--host-root"), default="/")),
        help="where /sys is read (default: /)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=first_value(env("--log-format"), default="text"),
        help="log line format on stderr (default: text)",
    )
    return parser


def open_inventory(
    prog: str, args: argparse.Namespace, *, log_level: int = logging.INFO
) -> NodeInventory | None:
    """Set up logging from `args` and read the inventory of the source they name; None after
    writing the one-line failure to stderr."""
    logsetup.configure(args.log_format, level=log_level)
    try:
        return load_inventory(args.nvml_fixture, args.host_root)
    except AgentError as exc:
        sys.stderr.write(failure_line(prog, exc))
        return None


def failure_line(prog: str, exc: AgentError) -> str:
    """The one line a command prints for an error it expects."""
    if isinstance(exc, NvmlUnavailable):
        return (
            f"{prog}: NVML is not available on this machine ({exc}); "
            "run it on a GPU node or pass --nvml-fixture NAME to use a fake GPU node\n"
        )
    return f"{prog}: {exc}\n"
