"""Core NodeSelectors from the API's JSON (`nodeSelectorTerms`, each `matchExpressions` on a
node's labels and `matchFields` on its name) into `NodeSelectorTerm`s, and back: one reading for
every place that meets one (a pod's required and preferred node affinity, a ResourceSlice's
`nodeSelector`, a claim allocation's). ValueError names the field of what does not parse: not a
list or an object where one belongs, an unknown operator, a field other than `metadata.name`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .request import NodeSelectorRequirement, NodeSelectorTerm, Operator

__all__ = ["node_selector_terms", "requirements", "selector_wire"]

NAME_FIELD = "metadata.name"
"""The one node field a term's `matchFields` may read."""


def node_selector_terms(raw: object, where: str) -> tuple[NodeSelectorTerm, ...]:
    """A NodeSelector's terms (ORed), each its requirements (ANDed). An empty term list is one
    empty term, which matches no node (as the API reads it)."""
    selector = _mapping(raw, where)
    terms = []
    for i, term in enumerate(
        _list(selector.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    ):
        at = f"{where}.nodeSelectorTerms[{i}]"
        found = _mapping(term, at)
        terms.append(
            NodeSelectorTerm(
                match_expressions=requirements(
                    found.get("matchExpressions"), f"{at}.matchExpressions"
                ),
                match_fields=_fields(found.get("matchFields"), f"{at}.matchFields"),
            )
        )
    return tuple(terms) or (NodeSelectorTerm(),)


def requirements(raw: object, where: str) -> tuple[NodeSelectorRequirement, ...]:
    """A term's `matchExpressions` (or `matchFields`, unchecked: `node_selector_terms` checks
    them), at `where`."""
    out = []
    for j, expr in enumerate(_list(raw, where)):
        at = f"{where}[{j}]"
        found = _mapping(expr, at)
        key = found.get("key")
        if not isinstance(key, str) or not key:
            raise ValueError(f"{at}.key: want a non-empty string, got {key!r}")
        try:
            operator = Operator(str(found.get("operator")))
        except ValueError:
            known = ", ".join(Operator)
            raise ValueError(
                f"{at}.operator: {found.get('operator')!r} is not one of {known}"
            ) from None
        values = tuple(str(v) for v in _list(found.get("values"), f"{at}.values"))
        out.append(NodeSelectorRequirement(key=key, operator=operator, values=values))
    return tuple(out)


def _fields(raw: object, where: str) -> tuple[NodeSelectorRequirement, ...]:
    """A term's `matchFields`: `metadata.name` with `In` or `NotIn`, as the API server admits."""
    found = requirements(raw, where)
    for j, req in enumerate(found):
        if req.key != NAME_FIELD:
            raise ValueError(f"{where}[{j}].key: {req.key!r} is not a node field ({NAME_FIELD})")
        if req.operator not in (Operator.IN, Operator.NOT_IN):
            raise ValueError(f"{where}[{j}].operator: {req.operator} (In or NotIn)")
    return found


def selector_wire(terms: tuple[NodeSelectorTerm, ...]) -> dict[str, object]:
    """`terms` as the API writes a NodeSelector (empty lists left out, as its JSON does)."""
    out = []
    for term in terms:
        wire: dict[str, object] = {}
        for name, found in (
            ("matchExpressions", term.match_expressions),
            ("matchFields", term.match_fields),
        ):
            if found:
                wire[name] = [_requirement_wire(r) for r in found]
        out.append(wire)
    return {"nodeSelectorTerms": out}


def _requirement_wire(req: NodeSelectorRequirement) -> dict[str, object]:
    wire: dict[str, object] = {"key": req.key, "operator": str(req.operator)}
    if req.values:
        wire["values"] = list(req.values)
    return wire


def _mapping(raw: object, where: str) -> Mapping[str, object]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: want an object, got {raw!r}")
    return raw


def _list(raw: object, where: str) -> list[object]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"{where}: want a list, got {raw!r}")
    return raw
