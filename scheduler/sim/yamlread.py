"""Typed reading of simulator YAML/JSON documents; every failure names the file and the key path."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from agent.docread import DocReader, kind

__all__ = ["Reader", "WorkloadError"]


class WorkloadError(ValueError):
    """A bad simulator input (workload or cluster): `<file>: <key.path>: <reason>`."""


@dataclass(frozen=True, slots=True)
class Reader(DocReader):
    """Reads one simulator input; failures raise `WorkloadError`. Strings must be non-empty."""

    error: ClassVar[type[Exception]] = WorkloadError

    def as_str(
        self,
        value: Any,
        path: str,
        pattern: re.Pattern[str] | None = None,
        hint: str = "",
        *,
        allow_empty: bool = False,
    ) -> str:
        return DocReader.as_str(self, value, path, pattern, hint, allow_empty=allow_empty)

    def str_map(self, value: Any, path: str) -> dict[str, str]:
        doc = self.any_mapping(value, path)
        return {self.as_str(k, path): self.as_str(v, f"{path}.{k}") for k, v in doc.items()}

    def as_float(self, value: Any, path: str, minimum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(path, f"expected a number, got {kind(value)}")
        if minimum is not None and value < minimum:
            self.fail(path, f"must be >= {minimum}, got {value}")
        return float(value)
