"""Kubernetes resource quantities (`100m`, `1Gi`, `2`, `1e3`) as exact fractions.

Used by the kubelet-config reader (reservations), the NRT codec (capacity, allocatable,
available) and the scheduler (pod requests, node allocatable). Standard library only, so the
pure codecs can use it.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_PATTERN = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([a-zA-Z]*|[eE][-+]?[0-9]+)$")

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}

MIB = 2**20


def parse_quantity(value: object) -> Fraction:
    """Parse an int or a quantity string exactly; raises ValueError naming the bad value."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float) and math.isfinite(value):
        return Fraction(value)
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """A quantity string's value, remembered: a cluster spells its quantities a few ways
    (`1`, `2Gi`, `500m`) across thousands of objects, and a Fraction is immutable."""
    match = _PATTERN.match(value.strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    if suffix[:1] in {"e", "E"} and suffix[1:]:
        return Fraction(number) * Fraction(10) ** int(suffix[1:])
    if suffix not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r} (unknown suffix {suffix!r})")
    return Fraction(number) * _SUFFIXES[suffix]


def to_milli(value: object) -> int:
    """The quantity in thousandths, rounded up (as the kubelet rounds CPU requests)."""
    return math.ceil(parse_quantity(value) * 1000)


def to_int(value: object) -> int:
    """The quantity rounded up to a whole number (bytes, device counts)."""
    return math.ceil(parse_quantity(value))


def resource_units(resource: str, value: object) -> int:
    """`value` in the integer units `resource` is counted in: millicores for `cpu`, whole units
    rounded up for anything else (memory and storage in bytes, devices in counts)."""
    return to_milli(value) if resource == "cpu" else to_int(value)


def format_milli(milli: int) -> str:
    """`2000` -> `"2"`, `1500` -> `"1500m"` (CPU style)."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"
