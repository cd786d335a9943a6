"""The one GPU node model shared by every part of gputopo.

NVML discovery builds it, the device plugin advertises it, the NRT codec encodes and decodes it, the
metrics read it, and the scheduler and simulator place pods on it. Standard library only: no pynvml
handle, protobuf message or kubernetes object ever appears here.

Shape::

    NodeInventory
    ├── gpus: Gpu ...            (index order)
    │   ├── mig_devices: MigDevice ...
    │   └── fabric: GpuFabric     (multi-node NVLink registration; None when unsupported)
    ├── numa_nodes: NumaNode ...
    └── links: LinkMatrix        (GPU×GPU cells of `nvidia-smi topo -m`)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import NewType

GpuUuid = NewType("GpuUuid", str)
MigUuid = NewType("MigUuid", str)
NodeName = NewType("NodeName", str)

MILLI_PER_GPU = 1000
"""One whole GPU in milli-GPU shares (the simulator's and time-slicing's unit)."""

# A device's health, as the kubelet's device-plugin API and the NRT's GPU zones both spell it.
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


class MigMode(StrEnum):
    DISABLED = "disabled"
    ENABLED = "enabled"
    UNSUPPORTED = "unsupported"


class NvlinkFabric(StrEnum):
    """How the NV<k> cells of a node are wired."""

    NVSWITCH = "nvswitch"
    DIRECT = "direct"
    NONE = "none"


class FabricState(StrEnum):
    """NVML's `nvmlGpuFabricState_t`: how far a GPU's registration with the NVLink fabric got."""

    NOT_SUPPORTED = "notSupported"
    NOT_STARTED = "notStarted"
    IN_PROGRESS = "inProgress"
    COMPLETED = "completed"


FABRIC_SUCCESS = "success"
"""A GPU fabric registration's status when NVML reports NVML_SUCCESS (else the NVML error word)."""

ZERO_CLUSTER_UUID = "00000000-0000-0000-0000-000000000000"
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuFabric:
    """A GPU's multi-node NVLink fabric info (`nvmlDeviceGetGpuFabricInfoV`).

    GPUs of one NVLink domain (an NVL72 rack) share a cluster UUID and a clique ID once their
    registration with the fabric manager completed.
    """

    cluster_uuid: str = ZERO_CLUSTER_UUID  # canonical lower-case form
    clique_id: int = 0
    state: FabricState = FabricState.NOT_SUPPORTED
    status: str = FABRIC_SUCCESS  # "success" or the NVML error word (`NotReady`, ...)

    @property
    def attached(self) -> bool:
        """Registered: completed with status success and a non-zero cluster UUID (as GFD asks)."""
        return (
            self.state is FabricState.COMPLETED
            and self.status == FABRIC_SUCCESS
            and self.cluster_uuid != ZERO_CLUSTER_UUID
        )

    @property
    def clique(self) -> str | None:
        """`<clusterUuid>.<cliqueId>` (the `nvidia.com/gpu.clique` value) when attached."""
        return f"{self.cluster_uuid}.{self.clique_id}" if self.attached else None

    @classmethod
    def attached_to(cls, clique: str) -> GpuFabric:
        """The fabric info of a GPU attached to `clique`; ValueError unless it reads
        `<canonical lower-case UUID>.<decimal clique ID>`."""
        cluster, dot, number = clique.rpartition(".")
        if not dot or not _CANONICAL_UUID.fullmatch(cluster) or not number.isdecimal():
            raise ValueError(f"{clique!r} is not <cluster UUID>.<clique ID>")
        if cluster == ZERO_CLUSTER_UUID or str(int(number)) != number:
            raise ValueError(f"{clique!r} is not <cluster UUID>.<clique ID>")
        return cls(
            cluster_uuid=cluster,
            clique_id=int(number),
            state=FabricState.COMPLETED,
            status=FABRIC_SUCCESS,
        )


class TopoLevel(IntEnum):
    """NVML's `nvmlGpuTopologyLevel_t`; the value is NVML's own number."""

    INTERNAL = 0
    PIX = 10  # NVML_TOPOLOGY_SINGLE
    PXB = 20  # NVML_TOPOLOGY_MULTIPLE
    PHB = 30  # NVML_TOPOLOGY_HOSTBRIDGE
    NODE = 40
    SYS = 50  # NVML_TOPOLOGY_SYSTEM

    @property
    def distance(self) -> int:
        """PCIe distance for preferred allocation: PIX 1, PXB 2, PHB 3, NODE 4, SYS 5."""
        return self.value // 10


TOPO_LEGEND: tuple[tuple[str, str], ...] = (
    ("X", "Self"),
    (
        "SYS",
        "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
        "(e.g., QPI/UPI)",
    ),
    (
        "NODE",
        "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
        "within a NUMA node",
    ),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    (
        "PXB",
        "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    ),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)
"""The legend `nvidia-smi topo -m` prints under its matrix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuLink:
    """An off-diagonal cell of `nvidia-smi topo -m`: NV<k> when `nvlinks > 0`, else a PCIe level."""

    nvlinks: int = 0
    level: TopoLevel = TopoLevel.SYS

    def __post_init__(self) -> None:
        if self.nvlinks < 0:
            raise ValueError(f"nvlinks must be >= 0, got {self.nvlinks}")

    @property
    def cell(self) -> str:
        return f"NV{self.nvlinks}" if self.nvlinks else self.level.name

    @property
    def pcie_distance(self) -> int:
        """0 for an NVLink pair, else PIX 1 … SYS 5."""
        return 0 if self.nvlinks else self.level.distance

    @classmethod
    def from_cell(cls, cell: str) -> GpuLink:
        """Parse a `topo -m` cell (`NV12`, `PIX`, ...); raises ValueError for anything else."""
        text = cell.strip()
        if text.startswith("NV") and text[2:].isdigit() and int(text[2:]) > 0:
            return cls(nvlinks=int(text[2:]))
        if text in TopoLevel.__members__ and text != "INTERNAL":
            return cls(level=TopoLevel[text])
        raise ValueError(
            f"not a topo -m cell: {cell!r} (expected NV<k>, PIX, PXB, PHB, NODE or SYS)"
        )


@dataclass(frozen=True, slots=True)
class LinkMatrix:
    """Symmetric GPU×GPU matrix in index order; `rows[i][j]` is None only on the diagonal."""

    rows: tuple[tuple[GpuLink | None, ...], ...]

    def __post_init__(self) -> None:
        n = len(self.rows)
        for i, row in enumerate(self.rows):
            if len(row) != n:
                raise ValueError(f"link matrix row {i} has {len(row)} cells, expected {n}")
            for j, cell in enumerate(row):
                if (cell is None) != (i == j):
                    raise ValueError(f"link matrix cell [{i}][{j}]: only the diagonal is X")
                if cell != self.rows[j][i]:
                    raise ValueError(f"link matrix is not symmetric at [{i}][{j}]")

    @property
    def size(self) -> int:
        return len(self.rows)

    def link(self, a: int, b: int) -> GpuLink:
        cell = self.rows[a][b]
        if cell is None:
            raise ValueError(f"no link from GPU {a} to itself")
        return cell

    def cells(self) -> tuple[tuple[str, ...], ...]:
        """The matrix as `topo -m` cells, `X` on the diagonal."""
        return tuple(tuple("X" if c is None else c.cell for c in row) for row in self.rows)

    @classmethod
    def from_cells(cls, cells: Sequence[Sequence[str]]) -> LinkMatrix:
        return cls(
            tuple(
                tuple(None if i == j else GpuLink.from_cell(c) for j, c in enumerate(row))
                for i, row in enumerate(cells)
            )
        )

    def nvlink_islands(self) -> tuple[frozenset[int], ...]:
        """Connected components of the NVLink graph (a GPU with no NVLink is an island of one)."""
        seen: set[int] = set()
        islands: list[frozenset[int]] = []
        for start in range(self.size):
            if start in seen:
                continue
            stack, comp = [start], {start}
            while stack:
                a = stack.pop()
                for b in range(self.size):
                    if b not in comp and a != b and self.link(a, b).nvlinks:
                        comp.add(b)
                        stack.append(b)
            seen |= comp
            islands.append(frozenset(comp))
        return tuple(islands)


@dataclass(frozen=True, slots=True, kw_only=True)
class MigDevice:
    """One MIG device (GPU instance + compute instance) on a parent GPU."""

    uuid: MigUuid
    profile: str  # e.g. "1g.10gb", "1g.10gb+me"
    gi_id: int
    ci_id: int
    memory_mib: int
    start: int  # placement start, in memory slices
    size: int  # placement size, in memory slices
    multiprocessors: int = 0  # streaming multiprocessors (NVML's profile info); 0 where unsaid

    @property
    def compute_slices(self) -> int:
        return int(self.profile.split("g", 1)[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    index: int
    uuid: GpuUuid
    product: str
    memory_mib: int
    pci_bus_id: str  # NVML form, e.g. "00000000:18:00.0"
    minor: int
    numa_node: int | None  # None when sysfs says -1
    compute_capability: str  # "9.0"
    mig_mode: MigMode = MigMode.DISABLED
    mig_devices: tuple[MigDevice, ...] = ()
    memory_affinity: tuple[int, ...] = ()  # NUMA nodes NVML names for its memory; () if unsaid
    fabric: GpuFabric | None = None  # None where NVML has no fabric info (NotSupported)
    memory_reserved_mib: int = 0  # NVML's reserved memory (driver, firmware); 0 where unsaid

    @property
    def usable_memory_mib(self) -> int:
        """What processes can have of its memory: NVML's total less its reserved memory (what
        GPU shares split, DESIGN §12)."""
        return self.memory_mib - self.memory_reserved_mib

    @property
    def mig_layout(self) -> str:
        """`3g.40gb@0:4,1g.10gb@4:1` in placement order; empty when not in MIG mode."""
        ordered = sorted(self.mig_devices, key=lambda m: (m.start, m.gi_id, m.ci_id))
        return ",".join(f"{m.profile}@{m.start}:{m.size}" for m in ordered)


@dataclass(frozen=True, slots=True, kw_only=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...] = ()
    memory_mib: int = 0
    hugepages: tuple[tuple[str, int], ...] = ()  # (("2Mi", count), ("1Gi", count))
    distances: tuple[int, ...] = ()

    @property
    def cpulist(self) -> str:
        return format_cpulist(self.cpus)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInventory:
    gpus: tuple[Gpu, ...]
    links: LinkMatrix
    numa_nodes: tuple[NumaNode, ...] = ()
    driver_version: str = ""
    cuda_driver_version: int = 0
    nvlink_fabric: NvlinkFabric = NvlinkFabric.NONE
    _by_uuid: dict[str, Gpu] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.links.size != len(self.gpus):
            raise ValueError(
                f"link matrix is {self.links.size}×{self.links.size} for {len(self.gpus)} GPUs"
            )
        for pos, gpu in enumerate(self.gpus):
            if gpu.index != pos:
                raise ValueError(
                    f"GPU at position {pos} has index {gpu.index}; GPUs must be in index order"
                )
        self._by_uuid.update({g.uuid: g for g in self.gpus})

    def gpu(self, uuid: str) -> Gpu:
        """The GPU with this UUID; KeyError names it when unknown."""
        try:
            return self._by_uuid[uuid]
        except KeyError:
            raise KeyError(f"no GPU with UUID {uuid}") from None

    def nvlink_clique(self) -> str | None:
        """The multi-node NVLink clique of the node (DESIGN §13), None when it has none.

        `<clusterUuid>.<cliqueId>` that every fabric-attached GPU names; None when no GPU is
        attached or two attached GPUs name different cliques (as GFD writes no label then).
        """
        cliques = {c for g in self.gpus if g.fabric is not None and (c := g.fabric.clique)}
        return cliques.pop() if len(cliques) == 1 else None

    def mig_devices(self) -> Iterator[tuple[Gpu, MigDevice]]:
        for gpu in self.gpus:
            for mig in gpu.mig_devices:
                yield gpu, mig

    def numa_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.numa_nodes) or (0,)

    def gpu_numa_zone(self, gpu: Gpu) -> int | None:
        """The NUMA node the GPU is published under (DESIGN.md §5), None for none.

        Its sysfs `numa_node`; at -1 (common in VMs) the node NVML's memory affinity names when it
        names exactly one, else the only NUMA node of a one-node machine.
        """
        if gpu.numa_node is not None:
            return gpu.numa_node
        known = self.numa_ids()
        if len(gpu.memory_affinity) == 1 and gpu.memory_affinity[0] in known:
            return gpu.memory_affinity[0]
        return known[0] if len(known) == 1 else None


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a Linux cpulist (`0-3,8,10-11`); raises ValueError naming the bad part."""
    cpus: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad cpulist part {part!r}")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"bad cpulist range {part!r}")
        cpus.extend(range(first, last + 1))
    return tuple(sorted(set(cpus)))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Inverse of `parse_cpulist`, with ranges collapsed."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
