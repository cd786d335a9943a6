"""Typed reading of simulator YAML/JSON documents; every failure names the file and the key path."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

__all__ = ["Reader", "WorkloadError"]


class WorkloadError(ValueError):
    """A bad simulator input (workload or cluster): `<file>: <key.path>: <reason>`."""


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


@dataclass(frozen=True, slots=True)
class Reader:
    source: str

    def fail(self, path: str, reason: str) -> NoReturn:
        raise WorkloadError(f"{self.source}: {path or '(document)'}: {reason}")

    def mapping(
        self, value: Any, path: str, required: Iterable[str], optional: Iterable[str] = ()
    ) -> dict[str, Any]:
        """`value` as a mapping with only these keys; missing required keys are reported."""
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {_kind(value)}")
        req, opt = tuple(required), tuple(optional)
        for key in value:
            if key not in req and key not in opt:
                self.fail(f"{path}.{key}" if path else str(key), "unknown key")
        for key in req:
            if key not in value:
                self.fail(f"{path}.{key}" if path else key, "required key is missing")
        return value

    def any_mapping(self, value: Any, path: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {_kind(value)}")
        return value

    def str_map(self, value: Any, path: str) -> dict[str, str]:
        doc = self.any_mapping(value, path)
        return {self.as_str(k, path): self.as_str(v, f"{path}.{k}") for k, v in doc.items()}

    def as_list(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {_kind(value)}")
        return value

    def as_str(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def as_int(self, value: Any, path: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {_kind(value)}")
        if minimum is not None and value < minimum:
            self.fail(path, f"{value} is less than {minimum}")
        return value

    def as_float(self, value: Any, path: str, minimum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(path, f"expected a number, got {_kind(value)}")
        if minimum is not None and value < minimum:
            self.fail(path, f"{value} is less than {minimum}")
        return float(value)
