"""The Kubernetes CEL extensions DRA selectors use: quantities and semantic versions.

The CEL library (`common-expression-language`) converts values to and from plain Python types
and has no opaque types, so a quantity is the map `{"__quantity__": "<exact value>"}` and a version
`{"__semver__": "<version>"}`, both in a canonical form: `==` between two quantities (or two
versions) then compares their values, as in Kubernetes (`quantity("1Gi") == quantity("1024Mi")`).
Functions, with the Kubernetes names (apiserver `pkg/cel/library`, quantity and semver):

- quantity: `quantity(s)`, `isQuantity(s)`, `q.sign()`, `q.isInteger()`, `q.asInteger()`,
  `q.asApproximateFloat()`, `q.add(q|int)`, `q.sub(q|int)`, `q.compareTo(q)`,
  `q.isGreaterThan(q)`, `q.isLessThan(q)`;
- semver: `semver(s)`, `semver(s, normalize)`, `isSemver(s)`, `isSemver(s, normalize)`,
  `v.major()`, `v.minor()`, `v.patch()`, `v.compareTo(v)`, `v.isGreaterThan(v)`, `v.isLessThan(v)`.

A function given the wrong kind of value raises, which the CEL library reports as an evaluation
error (Kubernetes: "no such overload").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from types import MappingProxyType

from agent.quantity import parse_quantity

from .semver import Semver, parse_semver

__all__ = ["FUNCTIONS", "quantity_value", "semver_value"]

_Q = "__quantity__"
_V = "__semver__"
_INT64 = 2**63


def quantity_value(value: Fraction) -> dict[str, str]:
    """A quantity as CEL sees it."""
    return {_Q: str(value)}


def semver_value(version: Semver) -> dict[str, str]:
    """A version as CEL sees it (build metadata dropped: it takes no part in comparisons)."""
    return {_V: str(Semver(version.major, version.minor, version.patch, version.pre))}


def _q(value: object) -> Fraction:
    if isinstance(value, Mapping) and _Q in value:
        return Fraction(str(value[_Q]))
    raise TypeError(f"no such overload: expected a quantity, got {value!r}")


def _v(value: object) -> Semver:
    if isinstance(value, Mapping) and _V in value:
        return parse_semver(str(value[_V]))
    raise TypeError(f"no such overload: expected a semver, got {value!r}")


def _operand(value: object) -> Fraction:
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    return _q(value)


def _quantity(text: object) -> dict[str, str]:
    if not isinstance(text, str):
        raise TypeError(f"no such overload: quantity({text!r})")
    return quantity_value(parse_quantity(text))


def _is_quantity(text: object) -> bool:
    try:
        _quantity(text)
    except (TypeError, ValueError):
        return False
    return True


def _semver(text: object, normalize: bool = False) -> dict[str, str]:
    if not isinstance(text, str):
        raise TypeError(f"no such overload: semver({text!r})")
    return semver_value(parse_semver(text, normalize=normalize))


def _is_semver(text: object, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except (TypeError, ValueError):
        return False
    return True


def _compare(a: object, b: object) -> int:
    if isinstance(a, Mapping) and _V in a:
        return _v(a).compare(_v(b))
    x, y = _q(a), _q(b)
    return (x > y) - (x < y)


def _as_integer(value: object) -> int:
    q = _q(value)
    if q.denominator != 1 or not -_INT64 <= q < _INT64:
        raise ValueError(f"cannot convert value to integer: {q}")
    return int(q)


def _sign(value: object) -> int:
    q = _q(value)
    return (q > 0) - (q < 0)


FUNCTIONS: Mapping[str, Callable[..., object]] = MappingProxyType(
    {
        "quantity": _quantity,
        "isQuantity": _is_quantity,
        "sign": _sign,
        "isInteger": lambda q: _q(q).denominator == 1 and -_INT64 <= _q(q) < _INT64,
        "asInteger": _as_integer,
        "asApproximateFloat": lambda q: float(_q(q)) if math.isfinite(float(_q(q))) else 0.0,
        "add": lambda q, other: quantity_value(_q(q) + _operand(other)),
        "sub": lambda q, other: quantity_value(_q(q) - _operand(other)),
        "semver": _semver,
        "isSemver": _is_semver,
        "major": lambda v: _v(v).major,
        "minor": lambda v: _v(v).minor,
        "patch": lambda v: _v(v).patch,
        "compareTo": _compare,
        "isGreaterThan": lambda a, b: _compare(a, b) > 0,
        "isLessThan": lambda a, b: _compare(a, b) < 0,
    }
)
"""Every extension function by its CEL name (receiver first for method-style calls)."""
