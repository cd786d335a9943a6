"""Alibaba GPU cluster trace (cluster-trace-gpu-v2023) CSV parsing.

Two file kinds, told apart by their header:

* node lists: ``sn,cpu_milli,memory_mib,gpu,model`` (model empty on CPU-only nodes);
* pod lists: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` followed, in all but the
  ``multigpu*`` files, by ``gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time``.

Every column is kept. A bad row raises `TraceError` naming the file, the line number and the
column. `gpu_milli` < 1000 is a share of one GPU (only with `num_gpu == 1`); `gpu_spec` lists the
GPU models a pod accepts, joined by ``|`` (empty = any).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from agent.model import MILLI_PER_GPU

_T = TypeVar("_T")

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL_COLUMNS = (
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
QOS_CLASSES = frozenset({"LS", "BE", "Burstable", "Guaranteed"})
POD_PHASES = frozenset({"Running", "Succeeded", "Failed", "Pending"})
MAX_GPUS_PER_POD = 8


class TraceError(ValueError):
    """A malformed trace file: the message names the file, the line and the column."""


class PodClass(StrEnum):
    """The pod classes of the FGD paper's failure breakdown."""

    CPU = "cpu"
    SHARE = "share"
    ONE = "1-gpu"
    TWO = "2-gpu"
    FOUR = "4-gpu"
    EIGHT = "8-gpu"
    OTHER = "other"

    @classmethod
    def of(cls, num_gpu: int, gpu_milli: int) -> PodClass:
        if num_gpu == 0:
            return cls.CPU
        if num_gpu == 1:
            return cls.SHARE if gpu_milli < MILLI_PER_GPU else cls.ONE
        return {2: cls.TWO, 4: cls.FOUR, 8: cls.EIGHT}.get(num_gpu, cls.OTHER)


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str  # empty on CPU-only nodes


@dataclass(frozen=True, slots=True, kw_only=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU, 0..1000
    gpu_spec: tuple[str, ...] = ()  # accepted GPU models, as listed (repeats kept); empty = any
    qos: str = ""
    pod_phase: str = ""
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None

    @property
    def pod_class(self) -> PodClass:
        return PodClass.of(self.num_gpu, self.gpu_milli)

    @property
    def gpu_milli_total(self) -> int:
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True, slots=True)
class _Row:
    source: str
    line: int
    cells: dict[str, str]

    def fail(self, column: str, reason: str) -> TraceError:
        return TraceError(f"{self.source}:{self.line}: column {column!r}: {reason}")

    def integer(self, column: str, lo: int = 0, hi: int | None = None) -> int:
        text = self.cells[column].strip()
        try:
            value = int(text)
        except ValueError:
            raise self.fail(column, f"expected an integer, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise self.fail(column, f"{value} is out of range ({bound})")
        return value

    def optional_integer(self, column: str) -> int | None:
        if column not in self.cells or not self.cells[column].strip():
            return None
        return self.integer(column)

    def choice(self, column: str, allowed: frozenset[str]) -> str:
        text = self.cells.get(column, "").strip()
        if text and text not in allowed:
            raise self.fail(column, f"{text!r} is not one of {', '.join(sorted(allowed))}")
        return text


def _rows(text: str, source: str, required: Sequence[str], optional: Sequence[str]) -> list[_Row]:
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(f"{source}:1: header lacks column(s) {', '.join(missing)}")
    unknown = [c for c in header if c not in required and c not in optional]
    if unknown:
        raise TraceError(f"{source}:1: unknown column(s) {', '.join(unknown)}")
    rows: list[_Row] = []
    for number, cells in enumerate(reader, start=2):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise TraceError(f"{source}:{number}: {len(cells)} cells, header has {len(header)}")
        rows.append(_Row(source, number, dict(zip(header, cells, strict=True))))
    return rows


def _node(row: _Row) -> TraceNode:
    name = row.cells["sn"].strip()
    if not name:
        raise row.fail("sn", "empty node name")
    gpus = row.integer("gpu", 0, 64)
    model = row.cells["model"].strip()
    if gpus and not model:
        raise row.fail("model", f"empty GPU model on a node with {gpus} GPUs")
    return TraceNode(
        name=name,
        cpu_milli=row.integer("cpu_milli"),
        memory_mib=row.integer("memory_mib"),
        gpus=gpus,
        model=model if gpus else "",
    )


def _pod(row: _Row) -> TracePod:
    name = row.cells["name"].strip()
    if not name:
        raise row.fail("name", "empty pod name")
    num_gpu = row.integer("num_gpu", 0, MAX_GPUS_PER_POD)
    gpu_milli = row.integer("gpu_milli", 0, MILLI_PER_GPU)
    if (num_gpu == 0) != (gpu_milli == 0):
        raise row.fail("gpu_milli", f"{gpu_milli} does not agree with num_gpu {num_gpu}")
    if num_gpu > 1 and gpu_milli < MILLI_PER_GPU:
        raise row.fail("gpu_milli", f"a share ({gpu_milli}) of more than one GPU ({num_gpu})")
    spec = tuple(m.strip() for m in row.cells.get("gpu_spec", "").split("|"))
    return TracePod(
        name=name,
        cpu_milli=row.integer("cpu_milli"),
        memory_mib=row.integer("memory_mib"),
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec=tuple(m for m in spec if m),
        qos=row.choice("qos", QOS_CLASSES),
        pod_phase=row.choice("pod_phase", POD_PHASES),
        creation_time=row.optional_integer("creation_time"),
        deletion_time=row.optional_integer("deletion_time"),
        scheduled_time=row.optional_integer("scheduled_time"),
    )


def _unique(items: Iterable[_T], name: Callable[[_T], str], source: str) -> list[_T]:
    seen: set[str] = set()
    out: list[_T] = []
    for item in items:
        key = name(item)
        if key in seen:
            raise TraceError(f"{source}: duplicate name {key!r}")
        seen.add(key)
        out.append(item)
    return out


def parse_node_list(text: str, source: str = "<node list>") -> list[TraceNode]:
    """Parse a node-list CSV; `source` names the file in errors."""
    nodes = [_node(r) for r in _rows(text, source, NODE_COLUMNS, ())]
    return _unique(nodes, lambda n: n.name, source)


def parse_pod_list(text: str, source: str = "<pod list>") -> list[TracePod]:
    """Parse a pod-list CSV (full or five-column `multigpu` form), in file order."""
    pods = [_pod(r) for r in _rows(text, source, POD_COLUMNS, POD_OPTIONAL_COLUMNS)]
    return _unique(pods, lambda p: p.name, source)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def read_node_list(path: Path) -> list[TraceNode]:
    return parse_node_list(_read(path), str(path))


def read_pod_list(path: Path) -> list[TracePod]:
    return parse_pod_list(_read(path), str(path))


def sniff_kind(path: Path) -> str:
    """`nodes` or `pods`, from the CSV header; TraceError for anything else."""
    first = _read(path).partition("\n")[0]
    header = {h.strip() for h in first.split(",")}
    if "sn" in header:
        return "nodes"
    if "num_gpu" in header:
        return "pods"
    raise TraceError(
        f"{path}:1: neither a node list (sn,...) nor a pod list (name,...,num_gpu,...)"
    )
