"""CEL device selectors: compiled once per expression, evaluated per device, verdicts memoised.

The variable is `device`, as in Kubernetes: `device.driver`, `device.attributes["domain"].name`,
`device.capacity["domain"].name` (a quantity), `device.allowMultipleAllocations`. A domain an
expression names but the device lacks reads as an empty map (Kubernetes does the same), so
`device.attributes["other.io"].x` is an error ("no such key") while `"x" in
device.attributes["other.io"]` is false. The extension functions are `cel_ext`'s.

A `Selectors` is the cache: one per scheduler (or simulation), fed immutable devices. It keeps
each device's CEL value while the device object lives in its memo (it holds the object, so an
`id` is never reused under it) and each expression's program; both are bounded.
"""

from __future__ import annotations

import re

import cel

from .cel_ext import FUNCTIONS, quantity_value, semver_value
from .errors import SelectorError
from .model import AttrValue, Device
from .semver import Semver

__all__ = ["Selectors"]

_MEMO_LIMIT = 200_000
_FNS = dict(FUNCTIONS)
_DOMAIN = re.compile(r"""(?:attributes|capacity)\s*\[\s*(?:"([^"]*)"|'([^']*)')\s*\]""")


class Selectors:
    """Compile-once, evaluate-per-device CEL selectors (see the module docstring)."""

    def __init__(self) -> None:
        self._programs: dict[str, object] = {}
        self._domains: set[str] = set()
        self._contexts: dict[int, tuple[Device, cel.Context]] = {}
        self._verdicts: dict[tuple[str, int], tuple[Device, bool]] = {}

    def program(self, expression: str) -> object:
        """The compiled expression; SelectorError when it does not compile."""
        found = self._programs.get(expression)
        if found is None:
            try:
                found = cel.compile(expression)
            except (ValueError, RuntimeError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise SelectorError(expression, f"does not compile: {first}") from None
            new = {a or b for a, b in _DOMAIN.findall(expression)} - self._domains
            if new:
                self._domains |= new
                self._contexts.clear()  # built without the new domains
            if len(self._programs) >= _MEMO_LIMIT:
                self._programs.clear()
            self._programs[expression] = found
        return found

    def matches(self, expression: str, device: Device) -> bool:
        """Whether `device` satisfies `expression`; SelectorError when it cannot tell."""
        key = (expression, id(device))
        hit = self._verdicts.get(key)
        if hit is not None and hit[0] is device:
            return hit[1]
        program = self.program(expression)
        try:
            verdict = program.execute(self._context(device))  # type: ignore[attr-defined]
        except KeyError as exc:
            raise SelectorError(expression, f"no such key: {exc}") from None
        except (ValueError, RuntimeError, TypeError) as exc:
            raise SelectorError(expression, f"{type(exc).__name__}: {exc}") from None
        if not isinstance(verdict, bool):
            raise SelectorError(expression, f"gives {type(verdict).__name__}, not bool")
        if len(self._verdicts) >= _MEMO_LIMIT:
            self._verdicts.clear()
        self._verdicts[key] = (device, verdict)
        return verdict

    def _context(self, device: Device) -> cel.Context:
        hit = self._contexts.get(id(device))
        if hit is not None and hit[0] is device:
            return hit[1]
        context = cel.Context(variables={"device": self._device_value(device)}, functions=_FNS)
        if len(self._contexts) >= _MEMO_LIMIT:
            self._contexts.clear()
        self._contexts[id(device)] = (device, context)
        return context

    def _device_value(self, device: Device) -> dict[str, object]:
        attributes: dict[str, dict[str, object]] = {d: {} for d in self._domains}
        for name, value in device.attributes.items():
            domain, _, ident = name.rpartition("/")
            attributes.setdefault(domain, {})[ident] = _cel_attr(value)
        capacity: dict[str, dict[str, object]] = {d: {} for d in self._domains}
        for name, cap in device.capacity.items():
            domain, _, ident = name.rpartition("/")
            capacity.setdefault(domain, {})[ident] = quantity_value(cap.value)
        return {
            "driver": device.id.driver,
            "attributes": attributes,
            "capacity": capacity,
            "allowMultipleAllocations": device.allow_multiple_allocations,
        }


def _cel_attr(value: AttrValue) -> object:
    return semver_value(value) if isinstance(value, Semver) else value
