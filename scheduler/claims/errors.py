"""Errors of the claims room.

    ClaimsError
    ├── SpecError(kind, name, field)   a ResourceClaim, template, DeviceClass or ResourceSlice
    │                                  the API server sent does not parse (names the object and
    │                                  the field)
    ├── SelectorError(expression)      a CEL selector does not compile, fails on a device or
    │                                  gives no bool
    └── SearchLimitError               the allocation search ran past its step limit

"Does not fit" is never an error: the allocator returns it as a result with a reason, and the
last two become such reasons there (naming the claim, request and expression).
"""

from __future__ import annotations

__all__ = ["ClaimsError", "SearchLimitError", "SelectorError", "SpecError"]


class ClaimsError(Exception):
    """Root of the claims room's errors."""


class SpecError(ClaimsError, ValueError):
    """An object does not parse: `kind` and `name` name it, `field` the offending path."""

    def __init__(self, kind: str, name: str, field: str, problem: str) -> None:
        super().__init__(f"{kind} {name}: {field}: {problem}")
        self.kind, self.name, self.field = kind, name, field


class SelectorError(ClaimsError):
    """A selector that does not compile, fails to evaluate or gives no bool on a device."""

    def __init__(self, expression: str, message: str) -> None:
        super().__init__(f"selector `{expression}`: {message}")
        self.expression, self.message = expression, message


class SearchLimitError(ClaimsError):
    """The allocation search took more than its step limit."""
