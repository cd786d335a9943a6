"""What `kubectl gputopo nodes` and `kubectl gputopo topo NODE` show of a node's decoded
NodeResourceTopology: plain dicts for `-o json|yaml`, and the tables.

Whole GPUs and MIG slices are counted apart, in the units a pod requests them: a GPU in MIG mode
is never handed out whole (its slices are, as `nvidia.com/mig-<profile>`), so it counts in
`migGpus` and its free slices in `migFree`, never in `wholeGpus` / `wholeGpusFree`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agent.gpu_load import format_time
from agent.labels import label_value
from agent.model import HEALTHY, UNHEALTHY, GpuUuid, format_cpulist
from agent.nrt import ATTR_SOURCE, DecodedTopology, is_gpu_free, is_whole_gpu
from agent.plural import counted
from agent.resource_names import GPU_RESOURCE, MIG_RESOURCE_PREFIX, model_key
from agent.share_pods import PodShare
from agent.share_usage import SharedGpu
from agent.shares import GPU_COMPUTE, GPU_MEMORY, Sharing
from agent.topo_table import render_legend, render_topo_matrix

NODES_HEADER = (
    "NODE", "PRODUCT", "GPUS", "WHOLE", "WHOLE FREE", "MIG GPUS", "MIG FREE", "NVLINK ISLANDS",
    "HEALTH",
)  # fmt: skip
SHARE_NOTE = (
    "\nSHARES FREE: shared GPUs (never handed out whole): free replicas and gputopo.io/gpu-memory "
    "of each GPU in use; N-idle: N shared GPUs with no share\n"
)
SHARE_LINES = frozenset({GPU_MEMORY, GPU_COMPUTE})
SHARING_NOTE = "; timeSlicing enforces nothing: memory and compute are what pods asked"
QUOTA_KEY_NOTE = (
    "QUOTA KEY of each GPU model, for a Queue's spec.min / spec.max "
    "(MIG: nvidia.com/mig-<profile>@<model>):"
)
MIG_NOTE = (
    "WHOLE: GPUs requested as nvidia.com/gpu; MIG GPUS are in MIG mode, requested by slice "
    "(MIG FREE: free slices, nvidia.com/mig-<profile>)"
)


def islands(topology: DecodedTopology) -> list[list[int]]:
    return [sorted(i) for i in topology.inventory.links.nvlink_islands()]


def mig_free(topology: DecodedTopology) -> dict[str, int]:
    """Free MIG devices by profile (resource tail), summed over the GPUs."""
    free: Counter[str] = Counter()
    for gpu in topology.availability.gpus:
        for r in gpu.resources:
            if r.name.startswith(MIG_RESOURCE_PREFIX):
                free[r.name[len(MIG_RESOURCE_PREFIX) :]] += r.available
    return dict(sorted(free.items()))


def shared_gpus(topology: DecodedTopology) -> dict[GpuUuid, SharedGpu]:
    """The GPUs the node splits into replicas, as its NRT GPU zones say (DESIGN §12)."""
    out: dict[GpuUuid, SharedGpu] = {}
    for gpu, entry in zip(topology.inventory.gpus, topology.availability.gpus, strict=True):
        replica = next((r.name for r in entry.resources if r.name not in SHARE_LINES), None)
        if entry.sharing is not Sharing.NONE and replica is not None:
            out[gpu.uuid] = SharedGpu(
                uuid=gpu.uuid, sharing=entry.sharing, replicas=entry.shares, resource=replica
            )
    return out


def share_summary(topology: DecodedTopology) -> list[dict[str, Any]]:
    """Per shared GPU: its mode, replicas, free replicas, and free memory and compute."""
    shared = shared_gpus(topology)
    out = []
    for gpu, entry in zip(topology.inventory.gpus, topology.availability.gpus, strict=True):
        if gpu.uuid not in shared:
            continue
        counts = {r.name: r for r in entry.resources}
        replica, memory = counts[shared[gpu.uuid].resource], counts.get(GPU_MEMORY)
        compute = counts.get(GPU_COMPUTE)
        out.append(
            {
                "gpu": gpu.index,
                "sharing": str(entry.sharing),
                "shares": entry.shares,
                "sharesFree": replica.available,
                "memoryFree": memory.available if memory else None,
                "computeFree": compute.available if compute else None,
            }
        )
    return out


def measured_summary(topology: DecodedTopology) -> list[dict[str, Any]]:
    """Per GPU with a reading in the NRT: what it really uses, as the agent measured (issue 47)."""
    return [
        {
            "gpu": gpu.index,
            "memoryUsedMiB": entry.load.memory_used_mib,
            "memoryMiB": gpu.memory_mib,
            "smPercent": entry.load.sm_percent,
            "powerW": entry.load.power_w,
            "measuredAt": format_time(entry.load.measured_at),
        }
        for gpu, entry in zip(topology.inventory.gpus, topology.availability.gpus, strict=True)
        if entry.load is not None
    ]


def node_summary(topology: DecodedTopology) -> dict[str, Any]:
    gpus = topology.inventory.gpus
    whole = [
        counts
        for gpu, counts in zip(gpus, topology.availability.gpus, strict=True)
        if is_whole_gpu(gpu) and counts.sharing is Sharing.NONE
    ]
    shares = share_summary(topology)
    products = sorted({g.product for g in gpus})
    return {
        "node": topology.node_name,
        "product": ", ".join(products),
        "quotaKeys": {p: quota_key(p) for p in products},
        "gpus": len(gpus),
        "wholeGpus": len(whole),
        "wholeGpusFree": sum(1 for counts in whole if is_gpu_free(counts)),
        "migGpus": sum(1 for g in gpus if not is_whole_gpu(g)),
        "sharedGpus": len(shares),
        "shares": shares,
        "measured": measured_summary(topology),
        "migFree": mig_free(topology),
        "nvlinkIslands": islands(topology),
        "unhealthy": [g.index for g in topology.availability.gpus if not g.healthy],
        "allocationSource": topology.attributes.get(ATTR_SOURCE, ""),
    }


def quota_key(product: str) -> str:
    """The key a Queue's `spec.min` / `spec.max` names GPU model `product` by: the scheduler
    reads the model from the node's `nvidia.com/gpu.product` label, the product as a label value
    (`NVIDIA H100 80GB HBM3` -> `nvidia.com/gpu@NVIDIA-H100-80GB-HBM3`)."""
    return model_key(GPU_RESOURCE, label_value(product))


def _quota_key_lines(summaries: Sequence[Mapping[str, Any]]) -> str:
    keys = dict(sorted(kv for s in summaries for kv in s["quotaKeys"].items()))
    if not keys:
        return ""
    width = max(len(p) for p in keys)
    lines = [f"  {p.ljust(width)}   {k}" for p, k in keys.items()]
    return f"\n{QUOTA_KEY_NOTE}\n" + "\n".join(lines) + "\n"


def _health_text(unhealthy: Sequence[int], total: int) -> str:
    if not unhealthy:
        return HEALTHY
    return f"{len(unhealthy)}/{total} {UNHEALTHY} (GPU {format_cpulist(unhealthy)})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    return "\n".join(lines) + "\n"


def render_nodes(summaries: Sequence[dict[str, Any]]) -> str:
    rows: list[tuple[str, ...]] = [
        (
            s["node"],
            s["product"] or "-",
            str(s["gpus"]),
            str(s["wholeGpus"]),
            str(s["wholeGpusFree"]),
            str(s["migGpus"]) if s["migGpus"] else "-",
            ",".join(f"{p}:{n}" for p, n in s["migFree"].items()) or "-",
            " ".join(format_cpulist(i) for i in s["nvlinkIslands"]) or "-",
            _health_text(s["unhealthy"], s["gpus"]),
        )
        for s in summaries
    ]
    note = f"\n{MIG_NOTE}\n" if any(s["migGpus"] for s in summaries) else ""
    keys = _quota_key_lines(summaries)
    header: tuple[str, ...] = NODES_HEADER
    if any(s["shares"] for s in summaries):
        rows = [(*row, _shares_text(s["shares"])) for row, s in zip(rows, summaries, strict=True)]
        header, note = (*header, "SHARES FREE (GPU:FREE/OF)"), note + SHARE_NOTE
    if any(s["measured"] for s in summaries):
        rows = [
            (*row, _measured_text(s["measured"])) for row, s in zip(rows, summaries, strict=True)
        ]
        header, note = (*header, "MEASURED USE (GPU:USED/OF SM)"), note + _measured_note(summaries)
    return table(header, rows) + note + keys


def _measured_text(measured: Sequence[Mapping[str, Any]]) -> str:
    parts = [
        f"{m['gpu']}:{m['memoryUsedMiB'] / 1024:.0f}/{m['memoryMiB'] / 1024:.0f}Gi "
        f"{m['smPercent']}%"
        for m in measured
        if m["memoryUsedMiB"] or m["smPercent"]
    ]
    idle = len(measured) - len(parts)
    return ",".join([*parts, f"{idle}-idle"] if idle else parts) or "-"


def _measured_note(summaries: Sequence[Mapping[str, Any]]) -> str:
    oldest = min(m["measuredAt"] for s in summaries for m in s["measured"])
    return (
        "\nMEASURED USE: GPU memory in use and SM utilisation as NVML reports them, averaged by "
        f"the agent (oldest reading {oldest}); requests are in the other columns\n"
    )


def _shares_text(shares: Sequence[Mapping[str, Any]]) -> str:
    if not shares:
        return "-"
    parts = []
    for s in shares:
        if s["sharesFree"] == s["shares"]:
            continue
        memory = "" if s["memoryFree"] is None else f"({s['memoryFree'] / 2**30:.0f}Gi)"
        parts.append(f"{s['gpu']}:{s['sharesFree']}/{s['shares']}{memory}")
    idle = len(shares) - len(parts)
    return ",".join([*parts, f"{idle}-idle"] if idle else parts)


def _counts_text(counts: Sequence[Any]) -> str:
    return ", ".join(_count_text(r) for r in counts) or "-"


def _count_text(r: Any) -> str:
    name = r.name.rpartition("/")[2]
    if r.name == GPU_MEMORY:
        return f"{name} {r.available / 2**30:.1f}/{r.allocatable / 2**30:.1f} GiB"
    return f"{name} {r.available}/{r.allocatable}"


def _numa_rows(topology: DecodedTopology) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for node in topology.inventory.numa_nodes:
        counts = topology.numa_counts(node.id)
        cpu, mem, gpu = counts.get("cpu"), counts.get("memory"), counts.get("nvidia.com/gpu")
        rows.append(
            (
                str(node.id),
                node.cpulist or "-",
                f"{cpu.available / 1000:g}/{cpu.allocatable / 1000:g}" if cpu else "-",
                f"{mem.available / 2**30:.1f}/{mem.allocatable / 2**30:.1f} GiB" if mem else "-",
                f"{gpu.available}/{gpu.allocatable}" if gpu else "-",
                " ".join(map(str, node.distances)) or "-",
            )
        )
    return rows


def share_rows(
    topology: DecodedTopology, shares: Mapping[GpuUuid, Sequence[PodShare]]
) -> list[dict[str, Any]]:
    """One entry per share container, by GPU index then pod."""
    index = {g.uuid: g.index for g in topology.inventory.gpus}
    return [
        {
            "gpu": index[uuid],
            "pod": s.pod,
            "container": s.container,
            "memory": s.memory_bytes,
            "compute": s.compute_percent,
        }
        for uuid in sorted(shares, key=lambda u: index[u])
        for s in sorted(shares[uuid], key=lambda s: (s.pod, s.container))
    ]


def _share_table(topology: DecodedTopology, rows: Sequence[Mapping[str, Any]] | None) -> str:
    modes = sorted({s["sharing"] for s in share_summary(topology)})
    if not modes:
        return ""
    title = f"Shares ({', '.join(modes)}{SHARING_NOTE if 'timeSlicing' in modes else ''})\n"
    if rows is None:
        return title + "(pods on the node not readable: no per-pod shares)\n"
    lines = [
        (str(r["gpu"]), r["pod"], r["container"], f"{r['memory'] / 2**30:.1f} GiB",
         "-" if r["compute"] is None else f"{r['compute']}%")
        for r in rows
    ]  # fmt: skip
    if not lines:
        return title + "(no share pods placed by gputopo-scheduler)\n"
    return title + table(("GPU", "POD", "CONTAINER", "MEMORY", "COMPUTE"), lines)


def render_topo(
    topology: DecodedTopology, shares: Sequence[Mapping[str, Any]] | None = None
) -> str:
    """The node's tables; `shares` (from `share_rows`) lists each share, None: unknown."""
    inv = topology.inventory
    island_of = {i: pos for pos, members in enumerate(islands(topology)) for i in members}
    head = (
        f"Node {topology.node_name}: {counted(len(inv.gpus), 'GPU')}, "
        f"driver {inv.driver_version or 'N/A'}, "
        f"topology manager {topology.topology_manager_policy}/{topology.topology_manager_scope}, "
        f"allocations from {topology.attributes.get(ATTR_SOURCE, '?')}\n"
    )
    gpu_rows = [
        (
            str(g.index),
            g.product,
            str(g.uuid),
            "N/A" if g.numa_node is None else str(g.numa_node),
            str(island_of[g.index]),
            HEALTHY if a.healthy else UNHEALTHY,
            _counts_text(a.resources),
        )
        for g, a in zip(inv.gpus, topology.availability.gpus, strict=True)
    ]
    numa_header = ("NUMA", "CPUS", "CPU FREE/ALLOC", "MEMORY FREE/ALLOC", "GPU FREE/ALLOC")
    parts = [
        head,
        render_topo_matrix(inv),
        render_legend(),
        table((*numa_header, "DISTANCES"), _numa_rows(topology)),
        table(("GPU", "PRODUCT", "UUID", "NUMA", "ISLAND", "HEALTH", "FREE/ALLOCATABLE"), gpu_rows),
    ]
    mig_rows = [(str(g.index), g.mig_layout) for g in inv.gpus if g.mig_devices]
    if mig_rows:
        parts.append(table(("GPU", "MIG LAYOUT (profile@start:size)"), mig_rows))
    share_part = _share_table(topology, shares)
    if share_part:
        parts.append(share_part)
    return "\n".join(parts)


def topo_data(
    topology: DecodedTopology, shares: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The node summary, the matrix, every GPU with its resources (`gpus`: this list replaces
    the summary's count), NUMA nodes, attributes, and `podShares` (`share_rows`; None: the
    pods were not readable)."""
    inv = topology.inventory
    gpus = [
        {
            "index": g.index,
            "uuid": g.uuid,
            "product": g.product,
            "numaNode": g.numa_node,
            "healthy": a.healthy,
            "migLayout": g.mig_layout,
            "resources": {
                r.name: {"allocatable": r.allocatable, "available": r.available}
                for r in a.resources
            },
        }
        for g, a in zip(inv.gpus, topology.availability.gpus, strict=True)
    ]
    return {
        **node_summary(topology),
        "matrix": [list(row) for row in inv.links.cells()],
        "gpus": gpus,
        "numa": [
            {"id": n.id, "cpus": n.cpulist, "distances": list(n.distances)} for n in inv.numa_nodes
        ],
        "attributes": dict(topology.attributes),
        "podShares": None if shares is None else list(shares),
    }
