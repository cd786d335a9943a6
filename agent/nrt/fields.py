"""Typed reading of a raw NodeResourceTopology object for `agent.nrt.decode`: each accessor
checks one field's shape and raises `TopologyDecodeError` naming the node and the field path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from agent.availability import ResourceCounts
from agent.errors import TopologyDecodeError
from agent.model import GpuFabric
from agent.quantity import resource_units

AMOUNTS = ("capacity", "allocatable", "available")
"""The counts of each entry of a zone's `resources`, in ResourceCounts order."""


@dataclass(frozen=True, slots=True)
class FieldReader:
    """Typed access to the raw object; every failure names the node and the field."""

    node: str

    def fail(self, field: str, reason: str) -> NoReturn:
        raise TopologyDecodeError(self.node, field, reason)

    def mapping(self, value: object, field: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(field, f"expected an object, got {type(value).__name__}")
        return value

    def items(self, value: object, field: str) -> Sequence[Any]:
        if not isinstance(value, list):
            self.fail(field, f"expected a list, got {type(value).__name__}")
        return value

    def text(self, value: object, field: str) -> str:
        if not isinstance(value, str):
            self.fail(field, f"expected a string, got {type(value).__name__}")
        return value

    def integer(self, value: object, field: str, *, minimum: int = 0) -> int:
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(field, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def suffix_id(self, name: str, prefix: str, field: str) -> int:
        tail = name[len(prefix) :]
        if not name.startswith(prefix) or not tail.isdigit():
            self.fail(field, f"zone name {name!r} is not {prefix}<number>")
        return int(tail)

    def attributes(self, value: object, field: str) -> dict[str, str]:
        """name -> value; the first entry wins for a duplicated name (as the Go helper does)."""
        out: dict[str, str] = {}
        for pos, raw in enumerate(self.items(value if value is not None else [], field)):
            entry = self.mapping(raw, f"{field}[{pos}]")
            name = self.text(entry.get("name"), f"{field}[{pos}].name")
            out.setdefault(name, self.text(entry.get("value"), f"{field}[{pos}].value"))
        return out

    def resources(self, value: object, field: str) -> tuple[ResourceCounts, ...]:
        out = []
        for pos, raw in enumerate(self.items(value if value is not None else [], field)):
            entry = self.mapping(raw, f"{field}[{pos}]")
            name = self.text(entry.get("name"), f"{field}[{pos}].name")
            amounts = [self.quantity(name, entry.get(k), f"{field}[{pos}].{k}") for k in AMOUNTS]
            out.append(
                ResourceCounts(
                    name=name, capacity=amounts[0], allocatable=amounts[1], available=amounts[2]
                )
            )
        return tuple(out)

    def quantity(self, name: str, value: object, field: str) -> int:
        if value is None:
            self.fail(field, "is required")
        try:
            amount = resource_units(name, value)
        except ValueError as exc:
            self.fail(field, str(exc))
        if amount < 0:
            self.fail(field, f"negative quantity {value!r}")
        return amount

    def fabric(self, value: str | None, field: str) -> GpuFabric | None:
        """A GPU zone's `clique`: the GPU is attached to that NVLink clique (absent: it is not)."""
        if value is None:
            return None
        try:
            return GpuFabric.attached_to(value)
        except ValueError as exc:
            self.fail(field, str(exc))
