"""The settings of `gputopo-scheduler run`: flags, then `GPUTOPO_<FLAG>` environment variables,
then the `version: v1` config file (`--config`), then defaults. Bad input is a `ConfigError`
naming the flag or field (the command exits 2 with it).

Light on purpose (no runtime, informers or metrics server, and the config file's module only in
`Flags.settings`): `run` reads and checks the flags (`read_flags`), connects and starts the first
lists, and only then reads the config file and imports the rest (`scheduler.cli.runtime`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from agent.dispatch import CommandParser, version_line
from agent.errors import ConfigError
from agent.hostport import parse_address
from agent.objkey import name_problem
from agent.precedence import (
    Setting,
    env_var,
    first_set,
    first_value,
    from_env,
    from_flag,
    from_value,
)

if TYPE_CHECKING:
    from scheduler.config import SchedulerConfig

PROG = "gputopo-scheduler run"
DEFAULT_NAME = "gputopo-scheduler"
DEFAULT_NAMESPACE = "gputopo-system"
DEFAULT_METRICS = ":9446"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
Default = TypeVar("Default", str, None)


class _Parser(CommandParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    kubeconfig: str | None
    config: SchedulerConfig
    scheduler_name: str
    leader_elect: bool
    leader_elect_namespace: str
    metrics_address: str
    log_format: str


def _parser() -> _Parser:
    p = _Parser(prog=PROG, description="Run the gputopo secondary scheduler against a cluster.")
    p.add_argument("--version", action="version", version=version_line(PROG))
    p.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig path (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="scheduler config file, `version: v1` (default: none, the built-in defaults)",
    )
    p.add_argument(
        "--scheduler-name",
        metavar="NAME",
        help=f"spec.schedulerName to serve, an RFC 1123 name (default {DEFAULT_NAME})",
    )
    p.add_argument(
        "--leader-elect",
        nargs="?",
        const="true",
        metavar="true|false",
        help="elect a leader with a coordination.k8s.io Lease (default off)",
    )
    p.add_argument(
        "--leader-elect-namespace",
        metavar="NAMESPACE",
        help=f"namespace of the Lease (default {DEFAULT_NAMESPACE})",
    )
    p.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help=f"HOST:PORT of /metrics, /healthz, /readyz (default {DEFAULT_METRICS})",
    )
    p.add_argument("--log-format", metavar="{text,json}", help="log line format (default text)")
    return p


def _bool(name: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ConfigError(f"{name}: expected true or false, got {value!r}")


@dataclass(frozen=True, slots=True)
class Flags:
    """The command line and the GPUTOPO_<FLAG> variables, read and checked before anything
    connects; the config file is read by `settings` (its defaults import placement)."""

    args: argparse.Namespace
    environ: Mapping[str, str]

    def given(self, flag: str) -> Setting | None:
        """`--<flag>`, else GPUTOPO_<FLAG> unless that is empty."""
        return first_set(
            from_flag(f"--{flag}", getattr(self.args, flag.replace("-", "_"))),
            from_env(self.environ, env_var(flag), blank_is_unset=True),
        )

    def given_value(self, flag: str) -> str | None:
        """The flag's or its variable's value; None when neither gives one (or it is blank)."""
        found = first_set(self.given(flag), skip_blank=True)
        return None if found is None else str(found.value)

    def settings(self) -> RunSettings:
        """Flags > GPUTOPO_<FLAG> > config file > defaults; ConfigError names what is wrong."""
        from scheduler.config import load_config

        def pick(flag: str, in_file: str | None, default: Default) -> str | Default:
            """The first non-empty of the flag, its variable, the file's value; else
            `default`."""
            found = first_set(self.given(flag), from_value("config file", in_file), skip_blank=True)
            return default if found is None else str(found.value)

        config = load_config(first_value(self.given("config")))
        elect = self.given("leader-elect")
        settings = RunSettings(
            kubeconfig=pick("kubeconfig", config.kubeconfig, None),
            config=config,
            scheduler_name=pick("scheduler-name", config.scheduler_name, DEFAULT_NAME),
            leader_elect=_bool("--leader-elect", elect.value)
            if elect is not None
            else bool(config.leader_elect),
            leader_elect_namespace=pick(
                "leader-elect-namespace", config.leader_elect_namespace, DEFAULT_NAMESPACE
            ),
            metrics_address=pick("metrics-address", config.metrics_address, DEFAULT_METRICS),
            log_format=pick("log-format", None, "text"),
        )
        _check(
            kubeconfig=settings.kubeconfig,
            scheduler_name=settings.scheduler_name,
            namespace=settings.leader_elect_namespace,
            metrics_address=settings.metrics_address,
            log_format=settings.log_format,
        )
        return settings


def read_flags(argv: Sequence[str], environ: Mapping[str, str]) -> Flags:
    """The flags and variables, each one given checked (ConfigError naming it), without the
    config file: `run` connects between this and `Flags.settings`."""
    flags = Flags(_parser().parse_args(list(argv)), environ)
    _check(
        kubeconfig=flags.given_value("kubeconfig"),
        scheduler_name=flags.given_value("scheduler-name"),
        namespace=flags.given_value("leader-elect-namespace"),
        metrics_address=flags.given_value("metrics-address"),
        log_format=flags.given_value("log-format"),
    )
    return flags


def load(argv: Sequence[str], environ: Mapping[str, str]) -> RunSettings:
    """Flags > GPUTOPO_<FLAG> > config file > defaults; ConfigError names what is wrong."""
    return read_flags(argv, environ).settings()


def _check(
    *,
    kubeconfig: str | None,
    scheduler_name: str | None,
    namespace: str | None,
    metrics_address: str | None,
    log_format: str | None,
) -> None:
    """ConfigError naming the first of these (None: not given) that is wrong."""
    if log_format is not None and log_format not in ("text", "json"):
        raise ConfigError(f"--log-format: expected text or json, got {log_format!r}")
    if metrics_address is not None:
        try:
            parse_address(metrics_address)
        except ValueError as exc:
            raise ConfigError(f"--metrics-address: {exc}") from None
    if kubeconfig is not None and not os.path.isfile(kubeconfig):
        raise ConfigError(f"--kubeconfig: no such file: {kubeconfig}")
    for flag, name, label in (
        ("--scheduler-name", scheduler_name, False),
        ("--leader-elect-namespace", namespace, True),
    ):
        if name is not None and (problem := name_problem(name, label=label)) is not None:
            raise ConfigError(f"{flag}: {name!r}: {problem}")
