"""Text rendering of a node inventory: the `nvidia-smi topo -m` matrix and the inventory tables.

Model objects in, strings out (the kubectl plugin reuses `render_topo_matrix` on an inventory it
decodes from a NodeResourceTopology). When NVML gave GPU fabric info, the summary names the
node's multi-node NVLink clique (or `none`) and a table lists each GPU's fabric state.
The matrix layout follows `topo -m`: a column per GPU, then
`CPU Affinity`, `NUMA Affinity` and `GPU NUMA ID` (`N/A` off Grace), each column two spaces wider
than its widest entry, `X` on the diagonal.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.model import TOPO_LEGEND, Gpu, GpuFabric, NodeInventory, NumaNode
from agent.plural import counted

_NA = "N/A"
_LABEL_WIDTH = 8  # `topo -m` starts the GPU columns at a tab stop


def render_topo_matrix(inventory: NodeInventory) -> str:
    """The GPU block of `nvidia-smi topo -m` with its header, one line per GPU."""
    names = [f"GPU{g.index}" for g in inventory.gpus]
    cells = inventory.links.cells()
    width = max((len(text) for text in (*names, *(c for row in cells for c in row))), default=0) + 2
    numa = {n.id: n for n in inventory.numa_nodes}
    affinity = [_affinity(g, numa) for g in inventory.gpus]
    cpu_w = max([len("CPU Affinity"), *(len(a) for a, _ in affinity)]) + 2
    numa_w = max([len("NUMA Affinity"), *(len(n) for _, n in affinity)]) + 2
    label_w = max([_LABEL_WIDTH, *(len(n) + 2 for n in names)])
    header = " " * label_w + "".join(n.ljust(width) for n in names)
    lines = [header + "CPU Affinity".ljust(cpu_w) + "NUMA Affinity".ljust(numa_w) + "GPU NUMA ID"]
    for i, name in enumerate(names):
        row = "".join((" X" if c == "X" else c).ljust(width) for c in cells[i])
        cpus, node = affinity[i]
        lines.append(name.ljust(label_w) + row + cpus.ljust(cpu_w) + node.ljust(numa_w) + _NA)
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _affinity(gpu: Gpu, numa: dict[int, NumaNode]) -> tuple[str, str]:
    """(CPU Affinity, NUMA Affinity) of a GPU: its NUMA node's cpulist and id, else N/A."""
    if gpu.numa_node is None:
        return _NA, _NA
    node = numa.get(gpu.numa_node)
    cpus = node.cpulist if node is not None and node.cpus else _NA
    return cpus, str(gpu.numa_node)


def render_legend() -> str:
    """The legend `topo -m` prints under the matrix, verbatim."""
    return "Legend:\n\n" + "".join(f"  {key:<4} = {text}\n" for key, text in TOPO_LEGEND)


def render_inventory(inventory: NodeInventory) -> str:
    """Everything `gputopo-agent inventory -o table` prints: GPUs, MIG, NUMA, matrix, legend."""
    parts = [
        _summary(inventory),
        _table(
            ("GPU", "NAME", "UUID", "MEMORY", "PCI BUS ID", "NUMA", "CC", "MIG"),
            [_gpu_row(g) for g in inventory.gpus],
        ),
    ]
    fabric = [_fabric_row(g.index, g.fabric) for g in inventory.gpus if g.fabric is not None]
    if fabric:
        parts.append(_table(("GPU", "FABRIC STATE", "STATUS", "CLIQUE"), fabric))
    migs = [
        (
            str(g.index),
            m.profile,
            f"{m.start}:{m.size}",
            str(m.gi_id),
            str(m.ci_id),
            f"{m.memory_mib} MiB",
            m.uuid,
        )
        for g, m in inventory.mig_devices()
    ]
    if migs:
        parts.append(
            _table(("GPU", "MIG PROFILE", "PLACEMENT", "GI", "CI", "MEMORY", "UUID"), migs)
        )
    parts.append(
        _table(
            ("NUMA", "CPUS", "MEMORY", "HUGEPAGES", "DISTANCES"),
            [_numa_row(n) for n in inventory.numa_nodes],
        )
    )
    parts += [render_topo_matrix(inventory), render_legend()]
    return "\n".join(parts)


def _summary(inventory: NodeInventory) -> str:
    cuda = inventory.cuda_driver_version
    line = (
        f"Driver {inventory.driver_version or _NA}, CUDA {cuda // 1000}.{cuda % 1000 // 10}, "
        f"{counted(len(inventory.gpus), 'GPU')}, NVLink fabric: {inventory.nvlink_fabric}"
    )
    if any(g.fabric is not None for g in inventory.gpus):
        line += f", NVLink clique: {inventory.nvlink_clique() or 'none'}"
    return line + "\n"


def _gpu_row(gpu: Gpu) -> tuple[str, ...]:
    numa = _NA if gpu.numa_node is None else str(gpu.numa_node)
    mig = str(gpu.mig_mode) + (f" ({gpu.mig_layout})" if gpu.mig_devices else "")
    memory = f"{gpu.memory_mib} MiB"
    return (
        str(gpu.index),
        gpu.product,
        gpu.uuid,
        memory,
        gpu.pci_bus_id,
        numa,
        gpu.compute_capability,
        mig,
    )


def _fabric_row(index: int, fabric: GpuFabric) -> tuple[str, ...]:
    """A GPU's multi-node NVLink registration; the clique only once attached (as GFD reads it)."""
    return (str(index), str(fabric.state), fabric.status, fabric.clique or "-")


def _numa_row(node: NumaNode) -> tuple[str, ...]:
    huge = ",".join(f"{size}={count}" for size, count in node.hugepages) or "-"
    distances = " ".join(map(str, node.distances))
    return (str(node.id), node.cpulist or "-", f"{node.memory_mib} MiB", huge, distances)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        for row in (header, *rows)
    ]
    return "\n".join(line.rstrip() for line in lines) + "\n"
