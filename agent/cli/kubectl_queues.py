"""The queue tree `kubectl gputopo queues` shows, built from the Queue objects as listed (pure).

Rows come root first, each queue's children indented under it and sorted by name. Queues the tree
cannot hold (a parent that does not exist, a parent cycle) follow in sections whose heading names
the problem, each section a small tree of its own; nothing here raises on a malformed object. A
Queue named `root` is not a row of its own: it only carries `paused` for the implicit root.

The GPU columns show `nvidia.com/gpu` (every model) from `spec.min`/`spec.max` and from the status
the scheduler writes (`used`, `borrowed`, `pending.resources`, `fairShare`); `-` where absent.
Each GPU model key (`nvidia.com/gpu@<product>`, MIG likewise) gets a row of its own under its
queue, with the same columns for that key.
STATE: `paused` when `spec.paused`, else the reason of the first problem condition (status False,
or True on a type other than `Valid`, as the scheduler writes `Overcommitted`), else `Invalid`
when a `spec.min`/`spec.max` key names a GPU model wrongly (`key_problems`: the scheduler's own
check, which a running scheduler reports as `Invalid` too; the model key's row says `invalid
key`), else in the problem sections `Cycle` or `UnknownParent` (the reasons the scheduler gives
such queues), else `unknown: no status yet` while no scheduler has written the Queue's status
(its figures are then `-` for want of a report, not for zero), else `ok`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.quantity import parse_quantity
from agent.resource_names import GPU_RESOURCE, MODEL_SEP, model_key_problem

__all__ = [
    "HEADER",
    "NO_STATUS",
    "ROOT",
    "QueueTree",
    "Section",
    "build_tree",
    "key_problems",
    "name_of",
    "queue_row",
    "queue_rows",
    "queue_state",
    "root_row",
    "tree_json",
]

ROOT = "root"
INVALID = "Invalid"
NO_STATUS = "unknown: no status yet"
HEADER = ("QUEUE", "MIN", "MAX", "USED", "BORROWED", "PENDING", "FAIR SHARE", "STATE")

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Section:
    """Queues in tree order with their depth; `problem` None for the tree under the root."""

    problem: str | None
    cycle: bool = False
    entries: list[tuple[int, Obj]] = field(default_factory=list)

    def unplaced_reason(self, depth: int) -> str | None:
        """Why a queue of this section cannot be scheduled (the scheduler's reasons); None in the
        tree under the root."""
        if self.problem is None:
            return None
        return "Cycle" if self.cycle and depth == 0 else "UnknownParent"


@dataclass(frozen=True, slots=True)
class QueueTree:
    root_paused: bool
    sections: list[Section]

    @property
    def queue_count(self) -> int:
        return sum(len(s.entries) for s in self.sections)


def _map(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def name_of(obj: Obj) -> str:
    return str(_map(obj.get("metadata")).get("name", ""))


def _parent(obj: Obj) -> str | None:
    """The parent's name; None directly under the root (no parent, or `root` named)."""
    parent = _map(obj.get("spec")).get("parent")
    return None if parent in (None, "", ROOT) else str(parent)


def _paused(obj: Obj | None) -> bool:
    return obj is not None and _map(obj.get("spec")).get("paused") is True


def build_tree(objects: Iterable[Obj]) -> QueueTree:
    """The tree of `objects` (a Queue list's items), then the sections of the unplaceable."""
    by_name = {name_of(o): o for o in objects if name_of(o)}
    root = by_name.pop(ROOT, None)
    children: dict[str | None, list[str]] = {}
    for name in sorted(by_name):
        children.setdefault(_parent(by_name[name]), []).append(name)
    placed: set[str] = set()
    main = Section(None)
    _walk(None, 0, children, by_name, placed, main)
    sections = [main, *_problem_sections(by_name, children, placed)]
    return QueueTree(root_paused=_paused(root), sections=sections)


def _walk(
    name: str | None,
    depth: int,
    children: Mapping[str | None, list[str]],
    by_name: Mapping[str, Obj],
    placed: set[str],
    section: Section,
) -> None:
    """Add `name` (unless None, the root) and its not yet placed subtree to `section`."""
    if name is not None:
        placed.add(name)
        section.entries.append((depth, by_name[name]))
    for child in children.get(name, ()):
        if child not in placed:
            _walk(child, depth + 1, children, by_name, placed, section)


def _up_chain(name: str, by_name: Mapping[str, Obj]) -> tuple[list[str], str | None]:
    """`name` and its ancestors up to a repeat or a parent outside `by_name`; and that parent."""
    chain = [name]
    while (up := _parent(by_name[chain[-1]])) is not None and up in by_name and up not in chain:
        chain.append(up)
    return chain, up


def _unplaced(
    by_name: Mapping[str, Obj], placed: set[str]
) -> tuple[dict[str, set[str]], list[list[str]]]:
    """Missing parent -> its existing children (the orphans); and every parent cycle once."""
    missing: dict[str, set[str]] = {}
    cycles: list[list[str]] = []
    for name in sorted(set(by_name) - placed):
        chain, up = _up_chain(name, by_name)
        if up in chain:
            if (cycle := _rotated(chain[chain.index(up) :])) not in cycles:
                cycles.append(cycle)
        elif up is not None:
            missing.setdefault(up, set()).add(chain[-1])
    return missing, cycles


def _problem_sections(
    by_name: Mapping[str, Obj], children: Mapping[str | None, list[str]], placed: set[str]
) -> list[Section]:
    """A section per missing parent (its orphans' subtrees), then one per parent cycle."""
    missing, cycles = _unplaced(by_name, placed)
    sections = []
    for parent, orphans in sorted(missing.items()):
        section = Section(f'parent "{parent}" does not exist')
        for orphan in sorted(orphans):
            _walk(orphan, 0, children, by_name, placed, section)
        sections.append(section)
    for cycle in sorted(cycles):
        section = Section(f"parent cycle {' -> '.join([*cycle, cycle[0]])}", cycle=True)
        placed.update(cycle)
        for member in sorted(cycle):
            section.entries.append((0, by_name[member]))
            for child in children.get(member, ()):
                if child not in placed:
                    _walk(child, 1, children, by_name, placed, section)
        sections.append(section)
    return sections


def _rotated(cycle: Sequence[str]) -> list[str]:
    """The cycle starting at its smallest name, so each cycle is found once."""
    start = cycle.index(min(cycle))
    return [*cycle[start:], *cycle[:start]]


# -- one queue's figures --------------------------------------------------------------------------


def _gpus(resources: Any, key: str = GPU_RESOURCE) -> str:
    """The `key` entry (default `nvidia.com/gpu`) as written (`16`, `"500m"`), `-` when absent."""
    value = _map(resources).get(key)
    if value is None:
        return "-"
    try:
        amount = parse_quantity(value)
    except ValueError:
        return str(value)
    return str(amount.numerator) if amount.denominator == 1 else str(value)


def _problem(conditions: Any) -> str | None:
    """The reason of the first problem condition (module docstring), None when there is none."""
    for condition in conditions if isinstance(conditions, list) else ():
        c = _map(condition)
        if c.get("status") == "False" or (c.get("status") == "True" and c.get("type") != "Valid"):
            return str(c.get("reason") or c.get("type") or "?")
    return None


def key_problems(obj: Obj) -> list[str]:
    """Each `spec.min` / `spec.max` key that names a GPU model wrongly, with why (as the
    scheduler words it)."""
    spec = _map(obj.get("spec"))
    return [
        f"spec.{field}[{key}]: {problem}"
        for field in ("min", "max")
        for key in sorted(map(str, _map(spec.get(field))))
        if (problem := model_key_problem(key)) is not None
    ]


def queue_state(obj: Obj, unplaced: str | None = None) -> str:
    """STATE (module docstring); `unplaced`: the reason of a queue outside the tree, if any."""
    if _paused(obj):
        return "paused"
    status = _map(obj.get("status"))
    reported = _problem(status.get("conditions"))
    reported = reported or (INVALID if key_problems(obj) else None) or unplaced
    return reported or ("ok" if status else NO_STATUS)


def queue_row(depth: int, obj: Obj, unplaced: str | None = None) -> tuple[str, ...]:
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    return (
        "  " * depth + name_of(obj),
        _gpus(spec.get("min")),
        _gpus(spec.get("max")),
        _gpus(status.get("used")),
        _gpus(status.get("borrowed")),
        _gpus(_map(status.get("pending")).get("resources")),
        _gpus(status.get("fairShare")),
        queue_state(obj, unplaced),
    )


def _model_keys(spec: Obj, status: Obj) -> list[str]:
    """The per-model keys (`nvidia.com/gpu@<product>`) named in the spec or the status."""
    maps = [spec.get("min"), spec.get("max"), status.get("used"), status.get("fairShare")]
    return sorted({str(k) for m in maps for k in _map(m) if MODEL_SEP in str(k)})


def queue_rows(depth: int, obj: Obj, unplaced: str | None = None) -> list[tuple[str, ...]]:
    """The queue's row, then a row per GPU model key under it (DESIGN §10 "Per GPU model"):
    `@<product>` for `nvidia.com/gpu@<product>`, the full key for a MIG resource."""
    rows = [queue_row(depth, obj, unplaced)]
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    for key in _model_keys(spec, status):
        label = key[len(GPU_RESOURCE) :] if key.startswith(GPU_RESOURCE + MODEL_SEP) else key
        pending = _map(status.get("pending")).get("resources")
        figures = [spec.get("min"), spec.get("max"), status.get("used"), status.get("borrowed")]
        figures += [pending, status.get("fairShare")]
        state = "" if model_key_problem(key) is None else "invalid key"
        rows.append(("  " * (depth + 1) + label, *(_gpus(f, key) for f in figures), state))
    return rows


def root_row(paused: bool) -> tuple[str, ...]:
    return (ROOT, "-", "-", "-", "-", "-", "-", "paused" if paused else "ok")


def queue_json(depth: int, obj: Obj, section: Section) -> dict[str, Any]:
    """One queue as `-o json` lists it: its spec and status maps as written, and the STATE."""
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    pending = _map(status.get("pending"))
    return {
        "name": name_of(obj),
        "parent": _parent(obj) or ROOT,
        "depth": depth,
        "problem": section.problem,
        "min": _map(spec.get("min")),
        "max": _map(spec.get("max")),
        "weight": spec.get("weight", 1),
        "paused": _paused(obj),
        "namespaces": list(spec.get("namespaces") or []),
        "used": _map(status.get("used")),
        "borrowed": _map(status.get("borrowed")),
        "pending": {"units": pending.get("units", 0), "resources": _map(pending.get("resources"))},
        "fairShare": _map(status.get("fairShare")),
        "conditions": list(status.get("conditions") or []),
        "keyProblems": key_problems(obj),
        "state": queue_state(obj, section.unplaced_reason(depth)),
    }


def tree_json(tree: QueueTree) -> list[dict[str, Any]]:
    """The implicit root first, then every queue in the order of the table."""
    root = {"name": ROOT, "parent": None, "depth": 0, "problem": None, "paused": tree.root_paused}
    rows = [root | {"state": "paused" if tree.root_paused else "ok"}]
    for section in tree.sections:
        for depth, obj in section.entries:
            rows.append(queue_json(depth, obj, section))
    return rows
