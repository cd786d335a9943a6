"""The queue tree: every valid queue under the implicit root, and what is wrong with the others.

`QuotaTree.build` never raises. A queue with a problem (malformed, unknown parent, in a cycle, a
namespace two queues claim, under an invalid parent) is left out of the tree and listed in
`problems`; pods that name it wait with that reason, and every other queue keeps working.
Children whose mins sum above their parent's min are kept but flagged `Overcommitted`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.quota.amounts import format_amount
from scheduler.quota.models import MODEL_SEP, base_of, has_model_keys
from scheduler.quota.spec import DEFAULT_QUEUE, ROOT, QueueSpec

__all__ = ["Problem", "QuotaTree"]


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a queue is flagged: `reason` is a condition reason; `fatal` leaves it out of the tree."""

    reason: str
    message: str
    fatal: bool = True


def _parent_of(spec: QueueSpec) -> str:
    return spec.parent or ROOT


class QuotaTree:
    """Immutable once built. `paths[q]` runs from `q` up to, not including, the root;
    `min_paths[q]` the queues of that path with a min, and `min_keys[q]` the keys they name."""

    def __init__(self, specs: Mapping[str, QueueSpec], problems: Mapping[str, Problem]) -> None:
        self.specs = dict(specs)
        self.problems = dict(problems)
        self.children: dict[str, list[str]] = {name: [] for name in self.specs}
        for name in sorted(self.specs):
            if name != ROOT:
                self.children[_parent_of(self.specs[name])].append(name)
        self.paths = {name: self._path(name) for name in self.specs}
        self.namespace_queue: dict[str, str] = {}
        for name, spec in sorted(self.specs.items(), key=lambda item: item[1].source != "Queue"):
            for ns in spec.namespaces if not self.children[name] else ():
                self.namespace_queue.setdefault(ns, name)  # a Queue before an ElasticQuota
        self.managed = frozenset(r for s in self.specs.values() for r in (*s.min, *s.max))
        self.has_models = has_model_keys(self.managed)
        self.model_mins = {q: _model_mins(s.min) for q, s in self.specs.items() if s.min}
        self.min_paths = {
            q: tuple(p for p in path if self.specs[p].min) for q, path in self.paths.items()
        }
        self.min_keys = {
            q: frozenset(k for p in path for k in self.specs[p].min)
            for q, path in self.min_paths.items()
        }
        self.model_min_queues = frozenset(q for q, s in self.specs.items() if has_model_keys(s.min))
        self.model_maxes = {q: _model_limits(s.max) for q, s in self.specs.items()}
        self.model_maxes = {q: limits for q, limits in self.model_maxes.items() if limits}

    @classmethod
    def build(cls, specs: Iterable[QueueSpec]) -> QuotaTree:
        by_name, problems = _index(specs)
        _drop_unreachable(by_name, problems)
        _flag_namespace_conflicts(by_name, problems)
        _drop_unreachable(by_name, problems)
        _flag_overcommitted(by_name, problems)
        return cls(by_name, problems)

    def _path(self, name: str) -> tuple[str, ...]:
        path = []
        while name != ROOT:
            path.append(name)
            name = _parent_of(self.specs[name])
        return tuple(path)

    def is_leaf(self, name: str) -> bool:
        return name in self.specs and name != ROOT and not self.children[name]

    def paused(self, leaf: str) -> str | None:
        """The paused queue on `leaf`'s path (`root` when the whole scheduler is paused)."""
        if self.specs[ROOT].paused:
            return ROOT
        return next((q for q in self.paths[leaf] if self.specs[q].paused), None)

    @property
    def trivial(self) -> bool:
        """Only the implicit root and default queue: nothing to order or admit."""
        return len(self.specs) == 2 and not self.specs[ROOT].paused


ModelMin = tuple[str, int, tuple[tuple[str, int], ...]]
ModelLimit = tuple[str, str, str, int]  # (model, model key, its plain resource, the limit)


def _model_limits(limits: Mapping[str, int]) -> tuple[ModelLimit, ...]:
    """The model keys of a `max`, each as (model, key, plain resource, limit)."""
    return tuple(
        (key.split(MODEL_SEP, 1)[1], key, base_of(key), limit)
        for key, limit in limits.items()
        if MODEL_SEP in key
    )


def _model_mins(mins: Mapping[str, int]) -> tuple[ModelMin, ...]:
    """Each plain key of a `min` that model keys of the same min also name: (the key, its min,
    each such model key with its min)."""
    out = []
    for plain, low in mins.items():
        if MODEL_SEP not in plain:
            named = tuple((k, m) for k, m in mins.items() if k != plain and base_of(k) == plain)
            if named:
                out.append((plain, low, named))
    return tuple(out)


def _index(specs: Iterable[QueueSpec]) -> tuple[dict[str, QueueSpec], dict[str, Problem]]:
    by_name: dict[str, QueueSpec] = {}
    problems: dict[str, Problem] = {}
    for spec in specs:
        if spec.name in by_name or spec.name in problems:
            problems[spec.name] = Problem("Duplicate", f"queue {spec.name} is defined twice")
            by_name.pop(spec.name, None)
        elif spec.problem:
            problems[spec.name] = Problem("Invalid", spec.problem)
        else:
            by_name[spec.name] = spec
    root = by_name.get(ROOT)
    by_name[ROOT] = QueueSpec(name=ROOT, paused=root is not None and root.paused, source="implicit")
    if root is not None and root.parent:
        problems[ROOT] = Problem("Invalid", "Queue root: spec.parent: root has no parent", False)
    by_name.setdefault(DEFAULT_QUEUE, QueueSpec(name=DEFAULT_QUEUE, source="implicit"))
    return by_name, problems


def _drop_unreachable(by_name: dict[str, QueueSpec], problems: dict[str, Problem]) -> None:
    """Remove queues whose parent is unknown, invalid, a cycle, or itself removed."""
    reachable = {ROOT}
    for name in sorted(by_name):
        _reach(name, by_name, problems, reachable)
    for name in [n for n in by_name if n not in reachable]:
        del by_name[name]


def _reach(
    name: str, by_name: Mapping[str, QueueSpec], problems: dict[str, Problem], ok: set[str]
) -> bool:
    chain: list[str] = []
    while name not in ok:
        if name in chain:
            cycle = " -> ".join([*chain[chain.index(name) :], name])
            for member in chain[chain.index(name) :]:
                problems[member] = Problem(
                    "Cycle", f"queue {member}: parents form a cycle: {cycle}"
                )
            _flag_below(chain, problems)
            return False
        chain.append(name)
        parent = _parent_of(by_name[name])
        if parent not in by_name:
            why = "is invalid" if parent in problems else "does not exist"
            problems.setdefault(
                chain[-1], Problem("UnknownParent", f"queue {chain[-1]}: parent {parent} {why}")
            )
            _flag_below(chain, problems)
            return False
        name = parent
    ok.update(chain)
    return True


def _flag_below(chain: list[str], problems: dict[str, Problem]) -> None:
    """Each queue of `chain` (child first) not yet flagged: its parent, next in line, is invalid."""
    for child, parent in itertools.pairwise(chain):
        problems.setdefault(
            child, Problem("UnknownParent", f"queue {child}: parent {parent} is invalid")
        )


def _flag_namespace_conflicts(by_name: dict[str, QueueSpec], problems: dict[str, Problem]) -> None:
    claims: dict[str, list[str]] = {}
    for name, spec in by_name.items():
        for ns in spec.namespaces:
            claims.setdefault(f"{spec.source}:{ns}", []).append(name)
    for claim, names in claims.items():
        ns = claim.partition(":")[2]
        if len(names) > 1:
            for name in names:
                others = ", ".join(sorted(n for n in names if n != name))
                problems[name] = Problem(
                    "NamespaceConflict", f"queue {name}: namespace {ns} is also claimed by {others}"
                )
                by_name.pop(name, None)


def _flag_overcommitted(by_name: Mapping[str, QueueSpec], problems: dict[str, Problem]) -> None:
    sums: dict[str, dict[str, int]] = {}
    for name, spec in sorted(by_name.items()):
        if name != ROOT and _parent_of(spec) != ROOT:
            total = sums.setdefault(_parent_of(spec), {})
            for r, amount in spec.min.items():
                total[r] = total.get(r, 0) + amount
            _flag_above_parent(spec, by_name[_parent_of(spec)], problems)
    for parent, total in sorted(sums.items()):
        own = by_name[parent].min
        over = [r for r, amount in sorted(total.items()) if r in own and amount > own[r]]
        if over:
            r = over[0]
            problems[parent] = Problem(
                "Overcommitted",
                f"queue {parent}: children's min {r} sums to {format_amount(r, total[r])} > its "
                f"min {format_amount(r, own.get(r, 0))}; guarantees hold only up to its min",
                fatal=False,
            )


def _flag_above_parent(spec: QueueSpec, parent: QueueSpec, problems: dict[str, Problem]) -> None:
    """A child whose own min is above its parent's min (for a resource the parent names)."""
    for r, amount in sorted(spec.min.items()):
        if r in parent.min and amount > parent.min[r]:
            problems[spec.name] = Problem(
                "MinAboveParent",
                f"queue {spec.name}: min {r} {format_amount(r, amount)} is above its parent "
                f"{parent.name}'s min {format_amount(r, parent.min[r])}",
                fatal=False,
            )
            return
