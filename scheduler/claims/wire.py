"""Reading resource.k8s.io/v1 JSON dicts field by field, with errors that name the object and field.

A `Fields` wraps one dict of one object (`kind`, `name`) at a path; its getters check the type and
raise `SpecError` naming `kind name: path.field: problem`. `parse` builds the model with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

from agent.quantity import parse_quantity
from scheduler.placement.nodeselector import node_selector_terms
from scheduler.placement.request import NodeSelectorTerm

from .errors import SpecError

__all__ = ["Fields", "fields_of"]


@dataclass(frozen=True, slots=True)
class Fields:
    kind: str
    name: str
    path: str
    data: Mapping[str, object]

    def error(self, field: str, problem: str) -> SpecError:
        return SpecError(self.kind, self.name, self._at(field), problem)

    def _at(self, field: str) -> str:
        return f"{self.path}.{field}" if self.path else field

    def has(self, field: str) -> bool:
        return self.data.get(field) is not None

    def text(self, field: str, default: str | None = None) -> str:
        value = self.data.get(field, default)
        if not isinstance(value, str) or (default is None and not value):
            raise self.error(field, f"want a non-empty string, got {value!r}")
        return value

    def opt_str(self, field: str) -> str | None:
        return self.text(field) if self.has(field) else None

    def integer(self, field: str, default: int) -> int:
        value = self.data.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(field, f"want an integer, got {value!r}")
        return value

    def flag(self, field: str, default: bool = False) -> bool:
        value = self.data.get(field, default)
        if not isinstance(value, bool):
            raise self.error(field, f"want true or false, got {value!r}")
        return value

    def quantity(self, field: str) -> Fraction:
        try:
            return parse_quantity(self.data.get(field))
        except ValueError as exc:
            raise self.error(field, str(exc)) from None

    def quantities(self, field: str) -> list[Fraction]:
        values = self.data.get(field) or []
        if not isinstance(values, list):
            raise self.error(field, f"want a list, got {values!r}")
        out = []
        for pos, value in enumerate(values):
            try:
                out.append(parse_quantity(value))
            except ValueError as exc:
                raise self.error(f"{field}[{pos}]", str(exc)) from None
        return out

    def sub(self, field: str, *, required: bool = False) -> Fields:
        value = self.data.get(field)
        if value is None and not required:
            value = {}
        if not isinstance(value, Mapping):
            raise self.error(field, f"want an object, got {value!r}")
        return Fields(self.kind, self.name, self._at(field), value)

    def items(self, field: str) -> Iterator[Fields]:
        """The objects of list `field` (absent: none), each at `field[i]`."""
        value = self.data.get(field) or []
        if not isinstance(value, list):
            raise self.error(field, f"want a list, got {value!r}")
        for pos, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise self.error(f"{field}[{pos}]", f"want an object, got {item!r}")
            yield Fields(self.kind, self.name, self._at(f"{field}[{pos}]"), item)

    def strs(self, field: str) -> tuple[str, ...]:
        value = self.data.get(field) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(field, f"want a list of strings, got {value!r}")
        return tuple(value)

    def node_selector(self, field: str) -> tuple[NodeSelectorTerm, ...]:
        """NodeSelector `field`'s terms (`scheduler.placement.nodeselector`)."""
        try:
            return node_selector_terms(self.data.get(field), self._at(field))
        except ValueError as exc:
            at, _, problem = str(exc).partition(": ")
            raise SpecError(self.kind, self.name, at, problem) from None

    def entries(self, field: str) -> Iterator[tuple[str, Fields]]:
        """The (key, object) pairs of map `field` (absent: none)."""
        mapping = self.sub(field)
        for key, value in mapping.data.items():
            if not isinstance(value, Mapping):
                raise mapping.error(key, f"want an object, got {value!r}")
            yield key, Fields(self.kind, self.name, mapping._at(key), value)


def fields_of(kind: str, obj: object) -> Fields:
    """The top of object `obj` of `kind`; its name is `ns/name` when namespaced."""
    if not isinstance(obj, Mapping):
        raise SpecError(kind, "?", "", f"want an object, got {type(obj).__name__}")
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    label = f"{namespace}/{name}" if namespace else str(name or "?")
    top = Fields(kind, label, "", obj)
    if not isinstance(name, str) or not name:
        raise top.error("metadata.name", "missing")
    return top
