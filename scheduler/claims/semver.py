"""Semantic versions (semver.org 2.0.0) as DRA `version` attributes and CEL's `semver()` use them.

Strict parsing takes `MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]` with no leading zeros;
`normalize=True` (CEL's `semver(s, true)`) first drops a leading `v`, pads a missing minor or
patch with 0 and strips leading zeros from the three numbers. Order follows semver precedence:
build metadata is ignored, a pre-release sorts before its release, numeric identifiers before
alphanumeric ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Semver", "parse_semver"]

_STRICT = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
_LOOSE_CORE = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$")


@dataclass(frozen=True, slots=True)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: str = ""

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(self.pre)
        return text + (f"+{self.build}" if self.build else "")

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver precedence."""
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        return _compare_pre(self.pre, other.pre)


def parse_semver(text: str, *, normalize: bool = False) -> Semver:
    """The version `text` spells; ValueError naming it when it is not one."""
    source = text
    if normalize:
        text = _normalized(text)
    match = _STRICT.match(text)
    if match is None:
        raise ValueError(f"not a semantic version: {source!r}")
    major, minor, patch, pre, build = match.groups()
    return Semver(
        int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else (), build or ""
    )


def _normalized(text: str) -> str:
    text = text[1:] if text[:1] in {"v", "V"} else text
    match = _LOOSE_CORE.match(text)
    if match is None:
        return text
    major, minor, patch, rest = match.groups()
    return f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{rest}"


def _compare_pre(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    if a == b:
        return 0
    if not a or not b:
        return 1 if not a else -1  # a release outranks its pre-releases
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return -1 if int(x) < int(y) else 1
        if x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1
        return -1 if x < y else 1
    return -1 if len(a) < len(b) else 1
