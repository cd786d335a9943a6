"""Where a command's setting comes from: flag > environment > config file > default.

Every command of gputopo reads its settings in this order (DESIGN.md §1). A caller lists the
candidates, highest precedence first, and `first_set` returns the first one a source sets, with
the source named as error messages name it (`flag --node-name`, `environment NODE_NAME`,
`agent.yaml: nodeName`, ...). Converting and checking the value stays with the command, which
knows its types. Pure: the environment is passed in as a mapping.

    found = first_set(
        from_flag("--node-name", args.node_name),
        from_env(environ, env_var("--node-name"), "NODE_NAME"),
        file_setting,
        Setting(source="default", value=socket.gethostname()),
    )

A source that does not set the setting gives None. An empty string is a value unless the caller
says otherwise: `blank_is_unset` for an environment variable set to "", `skip_blank` for a chain
where an empty value falls through to the next source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "GPUTOPO_"


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One source's value for a setting, and that source as messages name it."""

    source: str
    value: Any


def env_var(flag: str) -> str:
    """The variable of a flag: `--node-name` (or `node_name`) -> `GPUTOPO_NODE_NAME`."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def from_flag(flag: str, value: Any) -> Setting | None:
    """A command-line flag; None (argparse's default) means it was not given."""
    return None if value is None else Setting(source=f"flag {flag}", value=value)


def from_value(source: str, value: Any) -> Setting | None:
    """A value read elsewhere (a config file, a caller's argument); None leaves it unset."""
    return None if value is None else Setting(source=source, value=value)


def from_env(
    environ: Mapping[str, str], *names: str, blank_is_unset: bool = False
) -> Setting | None:
    """The first of `names` present in `environ`; with `blank_is_unset` one set to "" is skipped."""
    for name in names:
        value = environ.get(name)
        if value is None or (blank_is_unset and value == ""):
            continue
        return Setting(source=f"environment {name}", value=value)
    return None


def first_set(*candidates: Setting | None, skip_blank: bool = False) -> Setting | None:
    """The first candidate a source sets (None when none does); with `skip_blank` a candidate
    whose value is "" falls through to the next one."""
    for candidate in candidates:
        if candidate is None or (skip_blank and candidate.value == ""):
            continue
        return candidate
    return None


def first_value(*candidates: Setting | None, default: Any = None, skip_blank: bool = False) -> Any:
    """The value of `first_set(*candidates)`, or `default` when no source sets it."""
    found = first_set(*candidates, skip_blank=skip_blank)
    return default if found is None else found.value
