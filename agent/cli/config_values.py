"""The agent's options one by one: how each is named on the command line, in the environment and in
the config file, and how a raw value (a flag's text, a YAML scalar or list) becomes a typed one.

`convert` raises ValueError with a message that names the bad value; `config.load` prefixes the
source (the flag, the variable or `file: key`) and reports every problem at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.objkey import name_problem
from agent.precedence import env_var
from deviceplugin.settings import DeviceListStrategy

__all__ = ["Opt", "convert", "split_host_port"]

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class Opt:
    """One option: its flag, its file key, how to convert it and its default."""

    flag: str
    help: str
    kind: str = "str"  # str | path | bool | float | list | choice
    default: Any = None
    choices: tuple[str, ...] = ()
    env_aliases: tuple[str, ...] = ()  # more variables, after GPUTOPO_<FLAG>

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def env(self) -> str:
        return env_var(self.flag)

    @property
    def key(self) -> str:
        head, *rest = self.dest.split("_")
        return head + "".join(w.capitalize() for w in rest)


def split_host_port(address: str) -> tuple[str, int]:
    """`:9445` -> ("", 9445), `[::1]:0` -> ("::1", 0); ValueError names the address."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not HOST:PORT with a port in 0..65535")
    return host.strip("[]"), int(port)


def convert(opt: Opt, value: Any) -> Any:
    converters: dict[str, Callable[[Opt, Any], Any]] = {
        "str": lambda o, v: _text(v),
        "path": lambda o, v: Path(_text(v)),
        "bool": lambda o, v: _bool(v),
        "float": lambda o, v: _seconds(v),
        "list": lambda o, v: _list(o, v),
        "choice": lambda o, v: _choice(o, v),
    }
    converted = converters[opt.kind](opt, value)
    if opt.key == "metricsAddress":
        split_host_port(converted)
    if opt.key == "nodeName" and (problem := name_problem(converted)) is not None:
        raise ValueError(f"{converted!r} is {problem}" if problem.startswith("not") else problem)
    return converted


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return str(value)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(f"expected true or false, got {value!r}")


def _seconds(value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number of seconds, got {value!r}") from None
    if not seconds > 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    if not math.isfinite(seconds):
        raise ValueError(f"expected a finite number of seconds, got {value!r}")
    return seconds


def _choice(opt: Opt, value: Any) -> str:
    if isinstance(value, bool) and opt.key == "nodeLabels":  # YAML reads `on`/`off` as booleans
        value = "on" if value else "off"
    if value not in opt.choices:
        raise ValueError(f"{value!r} is not one of {', '.join(opt.choices)}")
    return str(value)


def _list(opt: Opt, value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"expected a comma-separated string or a list of strings, got {value!r}")
    parts = tuple(i.strip() for i in items if i.strip())
    if not parts:
        raise ValueError("expected at least one entry")
    if opt.key == "deviceListStrategy":
        allowed = tuple(DeviceListStrategy)
        bad = [p for p in parts if p not in allowed]
        if bad:
            raise ValueError(f"{bad} not supported (use {', '.join(allowed)})")
    return parts
