"""Topology domains in event mode (DESIGN §13): jobs' `topology:` field and the per-level figures.

A job may say `topology: {required: <label>}` or `topology: {preferred: <label>}` (one of them):
its gang is placed under that constraint, as the PodGroup annotations `gputopo.io/topology-*` ask.

`DomainMeter` follows, for every topology level (`topologyLevels`) that some node carries, how much
of each domain's GPU capacity is allocated. Per level, the run's JSON has `domains.<label>`:
`gangsWithin` and `gangsSpanning` (gangs started on the nodes of one domain, or of several; a gang
touching a node without the label spans), and `partlyUsedMean`, the time-weighted mean number of
domains partly in use (some but not all of their GPUs allocated) from the first arrival to the last.
It also keeps each gang's wait by its GPU count (`gangWaitP99`: the p99, nearest rank).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent.model import MILLI_PER_GPU
from scheduler.placement import Snapshot, TopologyConstraint
from scheduler.sim.queues import percentile
from scheduler.sim.yamlread import Reader

__all__ = ["DomainMeter", "read_topology"]


def read_topology(reader: Reader, raw: Any, path: str) -> TopologyConstraint | None:
    """A job's `topology:` field (None when absent)."""
    if raw is None:
        return None
    doc = reader.mapping(raw, path, (), ("required", "preferred"))
    if len(doc) != 1:
        reader.fail(path, "give exactly one of required or preferred")
    ((kind, label),) = doc.items()
    return TopologyConstraint(
        label=reader.as_str(label, f"{path}.{kind}"), required=kind == "required"
    )


class _Level:
    """One label: node -> domain, each domain's capacity and use (milli-GPU), the time integral."""

    def __init__(self, snapshot: Snapshot, label: str) -> None:
        self.domain_of: dict[str, str] = {}
        self.capacity: dict[str, int] = {}
        for name, node in snapshot.nodes.items():
            value = node.labels.get(label)
            if value is not None:
                self.domain_of[name] = value
                gpus = sum(1 for mig in node.gpu_mig if not mig)
                self.capacity[value] = self.capacity.get(value, 0) + gpus * MILLI_PER_GPU
        self.used = dict.fromkeys(self.capacity, 0)
        self.partly = 0
        self.area = 0.0
        self.within = self.spanning = 0

    def charge(self, node: str, milli: int) -> None:
        value = self.domain_of.get(node)
        if value is None:
            return
        before = self._partly(value)
        self.used[value] += milli
        self.partly += self._partly(value) - before

    def _partly(self, value: str) -> int:
        return int(0 < self.used[value] < self.capacity[value])


class DomainMeter:
    """The per-level figures of one run; the run calls `advance`, `charge` and `gang`."""

    def __init__(self, snapshot: Snapshot, levels: Iterable[str], start: float, end: float) -> None:
        self._levels = {label: _Level(snapshot, label) for label in levels}
        self._levels = {label: level for label, level in self._levels.items() if level.capacity}
        self._start, self._end, self._now = start, end, start
        self._gang_waits: dict[int, list[float]] = {}

    def advance(self, now: float) -> None:
        """Time moves to `now`; the partly used count held until then (inside the window)."""
        lo, hi = max(self._now, self._start), min(now, self._end)
        if hi > lo:
            for level in self._levels.values():
                level.area += level.partly * (hi - lo)
        self._now = max(self._now, now)

    def charge(self, node: str, milli: int) -> None:
        """`milli` GPU (negative: freed) allocated on `node`."""
        for level in self._levels.values():
            level.charge(node, milli)

    def gang(self, nodes: Iterable[str], gpus: int, wait: float) -> None:
        """A gang of `gpus` GPUs started on `nodes` after waiting `wait` seconds."""
        names = set(nodes)
        for level in self._levels.values():
            domains = {level.domain_of.get(n) for n in names}
            if len(domains) == 1 and None not in domains:
                level.within += 1
            else:
                level.spanning += 1
        self._gang_waits.setdefault(gpus, []).append(wait)

    def figures(self) -> dict[str, dict[str, float]]:
        span = self._end - self._start
        return {
            label: {
                "gangsWithin": level.within,
                "gangsSpanning": level.spanning,
                "partlyUsedMean": round(level.area / span, 2) if span > 0 else float(level.partly),
            }
            for label, level in self._levels.items()
        }

    def gang_wait_p99(self) -> Mapping[int, float | None]:
        """Gang GPUs -> the p99 wait of the gangs of that size that started."""
        out: dict[int, float | None] = {}
        for gpus, waits in sorted(self._gang_waits.items()):
            p99 = percentile(waits, 0.99)
            out[gpus] = None if p99 is None else round(p99, 2)
        return out
