"""CEL device selectors: compiled once per expression, evaluated per device, verdicts memoised.

The variable is `device`, as in Kubernetes: `device.driver`, `device.attributes["domain"].name`,
`device.capacity["domain"].name` (a quantity), `device.allowMultipleAllocations`. A domain an
expression names but the device lacks reads as an empty map (Kubernetes does the same), so
`device.attributes["other.io"].x` is an error ("no such key") while `"x" in
device.attributes["other.io"]` is false. The extension functions are `cel_ext`'s.

What an expression can read of a device is found when it compiles (`_Reads`): in Kubernetes
`device` is an object, so an expression reaches a device only through `device.<field>`, and
usually through `device.attributes["domain"].name`. Each device is shown to the expression as
only that part (a field, a domain or a name it never names cannot change the outcome), and the
verdict is kept per expression and that part: devices that look the same to an expression (all
the GPUs of one model, to a class selector) are evaluated once between them. Any use of `device`
this reading does not recognise shows the whole device.

A `Selectors` is the cache: one per scheduler (or simulation), fed immutable devices. It keeps
each expression's program and what it reads, each (expression, device object) verdict while the
device lives in its memo (it holds the object, so an `id` is never reused under it) and each
(expression, part seen) verdict; all are bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import TypeVar

from .cel_ext import FUNCTIONS, quantity_value, semver_value
from .errors import SelectorError
from .model import AttrValue, Capacity, Device
from .semver import Semver

__all__ = ["AttributeReads", "Selectors"]

_MEMO_LIMIT = 200_000
_FNS = dict(FUNCTIONS)


@cache
def _cel() -> ModuleType:
    """The CEL library, imported at the first selector: its package also loads its command line
    (prompt_toolkit and the like, about 0.4 s), which a scheduler start with no claims to decide
    need not wait for."""
    import cel

    return cel


_USE = re.compile(r"(?<![\w.])device\b")
_FIELD = re.compile(
    r"""\s*\.\s*(driver|allowMultipleAllocations|attributes|capacity)\b"""
    r"""(?:\s*\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\](?:\s*\.\s*([A-Za-z_]\w*)\b(?!\s*\())?)?"""
)

_V = TypeVar("_V")
_Names = frozenset[str] | None
"""The names an expression reads in one domain (None: the whole domain)."""


@dataclass(frozen=True, slots=True)
class _Reads:
    """What an expression reads of a device (`everything`, or the parts below). For attributes
    and capacity: `*_all` (the whole map: every domain of the device, and those named) or the
    domains it names with the names it reads in each."""

    everything: bool = False
    driver: bool = False
    multiple: bool = False
    attributes_all: bool = False
    attributes: Mapping[str, _Names] | None = None
    capacity_all: bool = False
    capacity: Mapping[str, _Names] | None = None


def _reads(expression: str) -> _Reads:
    """Every use of `device` in `expression` (conservatively: a use in a string counts too)."""
    fields: set[str] = set()
    named: dict[str, dict[str, set[str] | None]] = {"attributes": {}, "capacity": {}}
    for use in _USE.finditer(expression):
        access = _FIELD.match(expression, use.end())
        if access is None:
            return _Reads(everything=True)
        field, domain, ident = access.group(1), access.group(2) or access.group(3), access.group(4)
        if domain is None:
            fields.add(field)
            continue
        kept = named[field].setdefault(domain, set())
        if ident is None or kept is None:
            named[field][domain] = None
        else:
            kept.add(ident)
    return _Reads(
        driver="driver" in fields,
        multiple="allowMultipleAllocations" in fields,
        attributes_all="attributes" in fields,
        attributes=_frozen(named["attributes"]),
        capacity_all="capacity" in fields,
        capacity=_frozen(named["capacity"]),
    )


def _frozen(named: Mapping[str, set[str] | None]) -> dict[str, _Names]:
    return {d: None if names is None else frozenset(names) for d, names in named.items()}


@dataclass(slots=True)
class AttributeReads:
    """The device attributes that the expressions and constraints met so far may read: every
    one (`every`), or those of the domains read whole (`domains`) and the qualified names read
    (`names`). Devices that differ only in attributes none of them reads (a GPU's UUID) decide
    alike for all of them; `version` grows whenever the set does."""

    every: bool = False
    domains: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    version: int = 0

    def note_expression(self, expression: str) -> None:
        """What `expression` may read of a device's attributes is read."""
        found = _reads(expression)
        if found.everything or found.attributes_all:
            self._grow(every=True)
            return
        for domain, names in (found.attributes or {}).items():
            if names is None:
                self._grow(domains=(domain,))
            else:
                self._grow(names=(f"{domain}/{name}" for name in names))

    def note_name(self, name: str) -> None:
        """The attribute `name` (qualified, as a constraint names it) is read."""
        self._grow(names=(name,))

    def keeps(self, name: str) -> bool:
        """Whether the attribute `name` (qualified) may be read."""
        return self.every or name in self.names or name.rpartition("/")[0] in self.domains

    def _grow(
        self, *, every: bool = False, domains: Iterable[str] = (), names: Iterable[str] = ()
    ) -> None:
        before = (self.every, len(self.domains), len(self.names))
        self.every = self.every or every
        self.domains.update(domains)
        self.names.update(names)
        if (self.every, len(self.domains), len(self.names)) != before:
            self.version += 1


class Selectors:
    """Compile-once, evaluate-per-device CEL selectors (see the module docstring)."""

    def __init__(self) -> None:
        self._programs: dict[str, tuple[object, _Reads]] = {}
        self._verdicts: dict[tuple[str, int], tuple[Device, bool]] = {}
        self._seen: dict[tuple[str, str], bool] = {}

    def program(self, expression: str) -> object:
        """The compiled expression; SelectorError when it does not compile."""
        return self._compiled(expression)[0]

    def _compiled(self, expression: str) -> tuple[object, _Reads]:
        found = self._programs.get(expression)
        if found is None:
            try:
                program = _cel().compile(expression)
            except (ValueError, RuntimeError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise SelectorError(expression, f"does not compile: {first}") from None
            if len(self._programs) >= _MEMO_LIMIT:
                self._programs.clear()
            found = self._programs[expression] = (program, _reads(expression))
        return found

    def matches(self, expression: str, device: Device) -> bool:
        """Whether `device` satisfies `expression`; SelectorError when it cannot tell."""
        key = (expression, id(device))
        hit = self._verdicts.get(key)
        if hit is not None and hit[0] is device:
            return hit[1]
        program, reads = self._compiled(expression)
        value = _device_value(device, reads)
        seen = (expression, repr(value))
        verdict = self._seen.get(seen)
        if verdict is None:
            verdict = _evaluate(expression, program, value)
            if len(self._seen) >= _MEMO_LIMIT:
                self._seen.clear()
            self._seen[seen] = verdict
        if len(self._verdicts) >= _MEMO_LIMIT:
            self._verdicts.clear()
        self._verdicts[key] = (device, verdict)
        return verdict


def _evaluate(expression: str, program: object, value: dict[str, object]) -> bool:
    context = _cel().Context(variables={"device": value}, functions=_FNS)
    try:
        verdict = program.execute(context)  # type: ignore[attr-defined]
    except KeyError as exc:
        raise SelectorError(expression, f"no such key: {exc}") from None
    except (ValueError, RuntimeError, TypeError) as exc:
        raise SelectorError(expression, f"{type(exc).__name__}: {exc}") from None
    if not isinstance(verdict, bool):
        raise SelectorError(expression, f"gives {type(verdict).__name__}, not bool")
    return verdict


def _device_value(device: Device, reads: _Reads) -> dict[str, object]:
    """The device as the expression sees it: what `reads` says it can reach, in CEL's terms."""
    value: dict[str, object] = {}
    if reads.everything or reads.driver:
        value["driver"] = device.id.driver
    if reads.everything or reads.attributes_all or reads.attributes:
        every = reads.everything or reads.attributes_all
        value["attributes"] = _domains(device.attributes, reads.attributes, every, _cel_attr)
    if reads.everything or reads.capacity_all or reads.capacity:
        every = reads.everything or reads.capacity_all
        value["capacity"] = _domains(device.capacity, reads.capacity, every, _cel_capacity)
    if reads.everything or reads.multiple:
        value["allowMultipleAllocations"] = device.allow_multiple_allocations
    return value


def _domains(
    values: Mapping[str, _V],
    named: Mapping[str, _Names] | None,
    every: bool,
    convert: Callable[[_V], object],
) -> dict[str, dict[str, object]]:
    """`values` (qualified names) as {domain: {name: value}}: every domain when `every`, else
    only the names `named` asks for; each named domain there even when the device lacks it."""
    out: dict[str, dict[str, object]] = {d: {} for d in named or ()}
    for name, value in values.items():
        domain, _, ident = name.rpartition("/")
        if not every:
            wanted = (named or {}).get(domain, frozenset())
            if wanted is not None and ident not in wanted:
                continue
        out.setdefault(domain, {})[ident] = convert(value)
    return out


def _cel_attr(value: AttrValue) -> object:
    return semver_value(value) if isinstance(value, Semver) else value


def _cel_capacity(value: Capacity) -> object:
    return quantity_value(value.value)
