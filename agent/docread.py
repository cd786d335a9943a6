"""Typed reading of YAML/JSON documents: every failure names the file, the key path and the reason.

`read_yaml` turns a file into a document, or raises one line naming the file: unreadable, not
UTF-8, or `<file>:<line>:<column>` of a YAML syntax error (never PyYAML's five-line report;
`yaml_problem` makes that suffix for callers that parse text they read themselves).
`DocReader` subclasses set `error` (the exception raised as `"<file>: <path>: <reason>"`): the NVML
fixture loader raises `FixtureError`, the simulator's workload and cluster readers `WorkloadError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import yaml

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


@dataclass(frozen=True, slots=True)
class DocReader:
    """Where we are: the file's name, for messages."""

    error: ClassVar[type[Exception]] = ValueError

    source: str

    def fail(self, path: str, reason: str) -> NoReturn:
        """`<file>: <path>: <reason>`, or `<file>: <reason>` about the document as a whole."""
        raise self.error(f"{self.source}: {path}: {reason}" if path else f"{self.source}: {reason}")

    def mapping(
        self, value: Any, path: str, required: Iterable[str], optional: Iterable[str] = ()
    ) -> dict[str, Any]:
        """`value` as a mapping with exactly these keys (unknown keys and missing ones rejected)."""
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {kind(value)}")
        req, opt = tuple(required), tuple(optional)
        for key in value:
            if key not in req and key not in opt:
                allowed = ", ".join((*req, *opt))
                self.fail(join(path, str(key)), f"unknown key (allowed: {allowed})")
        for key in req:
            if key not in value:
                self.fail(join(path, key), "required key is missing")
        return value

    def any_mapping(self, value: Any, path: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {kind(value)}")
        return value

    def as_list(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {kind(value)}")
        return value

    def as_int(self, value: Any, path: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {kind(value)}")
        if minimum is not None and value < minimum:
            self.fail(path, f"must be >= {minimum}, got {value}")
        return value

    def as_str(
        self,
        value: Any,
        path: str,
        pattern: re.Pattern[str] | None = None,
        hint: str = "",
        *,
        allow_empty: bool = True,
    ) -> str:
        if not isinstance(value, str) or (not value and not allow_empty):
            what = "a string" if allow_empty else "a non-empty string"
            self.fail(path, f"expected {what}{hint}, got {kind(value)}")
        if pattern is not None and not pattern.fullmatch(value):
            self.fail(path, f"{value!r} is not valid{hint}")
        return value

    def as_number(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(path, f"expected a number, got {kind(value)}")
        if value < 0:
            self.fail(path, f"must be >= 0, got {value}")
        return float(value)


def kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"{_TYPE_NAMES.get(type(value), type(value).__name__)} ({value!r})"


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def read_yaml(path: Path, error: type[Exception] = ValueError, what: str = "it") -> Any:
    """The YAML document in `path`; `error` with one line naming the file when there is none."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not a text file (byte 0x{data[exc.start]:02x} at offset {exc.start} "
            "is not UTF-8); expected YAML"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{path}{yaml_problem(exc)}") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """`:<line>:<column>: YAML syntax error: <problem> (<context> at <l>:<c>)`, on one line."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f": offset {exc.position}: character #x{exc.character:04x} is not allowed in YAML"
    if not isinstance(exc, yaml.MarkedYAMLError):
        return f": not valid YAML: {_one_line(str(exc))}"
    mark = exc.problem_mark or exc.context_mark
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    text = f"{where}: YAML syntax error: {_one_line(exc.problem or exc.context or '')}"
    if exc.problem and exc.context:
        started = exc.context_mark
        at = f" at {started.line + 1}:{started.column + 1}" if started is not None else ""
        text += f" ({_one_line(exc.context)}{at})"
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())
