"""Host sysfs facts NVML does not give on x86: a GPU's NUMA node and the NUMA nodes themselves.

Everything is read below a `host_root` (``/`` on a node, a temporary tree in tests), and
`write_host_root` creates exactly the files these readers use, so the fake-backed agent runs the
same reading code as the real one.

Files read::

    <root>/sys/bus/pci/devices/<dddd:bb:dd.f>/numa_node        "-1" or "3"
    <root>/sys/devices/system/node/node<N>/cpulist             "48-63,176-191"
    <root>/sys/devices/system/node/node<N>/meminfo             "Node 3 MemTotal: … kB"
    <root>/sys/devices/system/node/node<N>/distance            "10 12 12 12 32 32 32 32"
    <root>/sys/devices/system/node/node<N>/hugepages/hugepages-<kB>kB/nr_hugepages
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from agent.model import NumaNode, parse_cpulist

PCI_DEVICES = Path("sys/bus/pci/devices")
_PCI_ROOT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")
NODE_DIR = Path("sys/devices/system/node")

_SIZE_UNITS = (("Gi", 1024 * 1024), ("Mi", 1024), ("Ki", 1))

_NODE_RE = re.compile(r"node(\d+)")
_HUGE_RE = re.compile(r"hugepages-(\d+)kB")
_MEMTOTAL_RE = re.compile(r"MemTotal:\s+(\d+)\s*kB")


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's `00000000:18:00.0` → sysfs' `0000:18:00.0` (lower case, 4-digit domain)."""
    text = nvml_bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not domain or not rest:
        raise ValueError(f"not a PCI bus id: {nvml_bus_id!r}")
    return f"{int(domain, 16):04x}:{rest}"


def gpu_numa_node(host_root: Path, nvml_bus_id: str) -> int | None:
    """The NUMA node sysfs gives the PCI device; None for -1 or when the file is missing."""
    path = host_root / PCI_DEVICES / sysfs_bus_id(nvml_bus_id) / "numa_node"
    try:
        value = int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
    return None if value < 0 else value


def pcie_root(host_root: Path, nvml_bus_id: str) -> str | None:
    """The PCIe root complex above the device (`pci0000:00`): the first `pci<domain>:<bus>` part of
    where its sysfs link points (`../../../devices/pci0000:00/0000:00:01.0/.../0000:18:00.0`);
    None when the link is missing (a fake host root, or no such device)."""
    link = host_root / PCI_DEVICES / sysfs_bus_id(nvml_bus_id)
    try:
        target = os.readlink(link)
    except OSError:
        return None
    return next((part for part in Path(target).parts if _PCI_ROOT.fullmatch(part)), None)


def numa_nodes(host_root: Path) -> tuple[NumaNode, ...]:
    """Every `node<N>` directory under the host root, in id order (empty when there is none)."""
    base = host_root / NODE_DIR
    if not base.is_dir():
        return ()
    ids = sorted(int(m.group(1)) for p in base.iterdir() if (m := _NODE_RE.fullmatch(p.name)))
    return tuple(_read_node(base / f"node{i}", i) for i in ids)


def _read_node(path: Path, node_id: int) -> NumaNode:
    cpus = parse_cpulist(_read(path / "cpulist"))
    match = _MEMTOTAL_RE.search(_read(path / "meminfo"))
    memory_mib = int(match.group(1)) // 1024 if match else 0
    distances = tuple(int(d) for d in _read(path / "distance").split())
    return NumaNode(
        id=node_id,
        cpus=cpus,
        memory_mib=memory_mib,
        hugepages=_read_hugepages(path / "hugepages"),
        distances=distances,
    )


def _read_hugepages(path: Path) -> tuple[tuple[str, int], ...]:
    if not path.is_dir():
        return ()
    found: list[tuple[int, str, int]] = []
    for entry in path.iterdir():
        match = _HUGE_RE.fullmatch(entry.name)
        if not match:
            continue
        kb = int(match.group(1))
        found.append((kb, hugepage_name(kb), int(_read(entry / "nr_hugepages") or "0")))
    return tuple((name, count) for _, name, count in sorted(found))


def hugepage_name(size_kb: int) -> str:
    """A hugepage size as Kubernetes names it: 2048 kB → `2Mi`, 1048576 kB → `1Gi`."""
    for suffix, factor in _SIZE_UNITS:
        if size_kb % factor == 0:
            return f"{size_kb // factor}{suffix}"
    raise AssertionError("unreachable: factor 1 divides every size")


def hugepage_kb(name: str) -> int:
    """Inverse of `hugepage_name`; ValueError for anything else (`2Mi`, `1Gi`, `64Ki`)."""
    for suffix, factor in _SIZE_UNITS:
        number = name.removesuffix(suffix)
        if number != name and number.isdigit() and int(number) > 0:
            return int(number) * factor
    raise ValueError(f"not a hugepage size: {name!r} (expected e.g. 2Mi or 1Gi)")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError:
        return ""


def write_host_root(
    root: Path, nodes: Iterable[NumaNode], gpu_numa: Mapping[str, int | None]
) -> Path:
    """Create the sysfs files above under `root` for these NUMA nodes and GPUs (bus id → node)."""
    for node in nodes:
        path = root / NODE_DIR / f"node{node.id}"
        path.mkdir(parents=True, exist_ok=True)
        (path / "cpulist").write_text(node.cpulist + "\n", encoding="ascii")
        meminfo = f"Node {node.id} MemTotal:       {node.memory_mib * 1024} kB\n"
        (path / "meminfo").write_text(meminfo, encoding="ascii")
        (path / "distance").write_text(" ".join(map(str, node.distances)) + "\n", encoding="ascii")
        for name, count in node.hugepages:
            huge = path / "hugepages" / f"hugepages-{hugepage_kb(name)}kB"
            huge.mkdir(parents=True, exist_ok=True)
            (huge / "nr_hugepages").write_text(f"{count}\n", encoding="ascii")
    for bus_id, numa in gpu_numa.items():
        dev = root / PCI_DEVICES / sysfs_bus_id(bus_id)
        dev.mkdir(parents=True, exist_ok=True)
        (dev / "numa_node").write_text(f"{-1 if numa is None else numa}\n", encoding="ascii")
    return root
