"""`kubectl gputopo` (installed as `kubectl-gputopo`): GPU capacity and topology from the nodes'
NodeResourceTopology objects, and the scheduler's queues.

    kubectl gputopo nodes            per node: product, GPUs total/free, MIG free by profile,
                                     NVLink islands, health
    kubectl gputopo topo NODE        the `nvidia-smi topo -m` matrix with its legend, NUMA and MIG
    kubectl gputopo queues           the Queue tree: GPUs min, max, used, borrowed, pending, fair
                                     share, and each queue's state
    kubectl gputopo queue pause|resume NAME
                                     set the Queue's spec.paused (`root`: the whole scheduler)
    --kubeconfig PATH, -o table|json, --log-format text|json

An object gputopo cannot read (another producer's, or a damaged one) gives one line naming the node
and the field, on stderr; the other nodes are still shown. Exit codes: 0 done, 1 the cluster could
not be read (the node has no object, the queue does not exist, the Queue CRD is not installed),
2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from agent import logsetup
from agent.cli import kubectl_queues as queues
from agent.errors import AgentError, TopologyDecodeError
from agent.model import HEALTHY, UNHEALTHY, format_cpulist
from agent.nrt import ATTR_SOURCE, DecodedTopology, decode, is_gpu_free
from agent.resource_names import MIG_RESOURCE_PREFIX
from agent.topo_table import render_legend, render_topo_matrix

if TYPE_CHECKING:
    from agent.kube.client import KubeSink

PROG = "kubectl-gputopo"
NO_QUEUE_CRD = "the Queue CRD (queues.scheduling.gputopo.io) is not installed"
SCHEDULER_PAUSED = "scheduler paused: queue root has spec.paused, nothing new starts"
NO_QUEUES = (
    "no queues: every pod uses the default queue; create one with `kubectl apply -f` on a Queue "
    "(apiVersion scheduling.gputopo.io/v1alpha1, spec.min/max, e.g. nvidia.com/gpu: 8)"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """Global flags go before or after the subcommand; `options(args)` fills in their defaults."""
    common = _Parser(add_help=False)
    common.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="kubeconfig file")
    common.add_argument("-o", "--output", choices=("table", "json"), default=argparse.SUPPRESS)
    common.add_argument("--log-format", choices=("text", "json"), default=argparse.SUPPRESS)
    parser = _Parser(prog="kubectl gputopo", description=__doc__.split("\n\n")[0], parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser(
        "nodes", parents=[common], help="GPUs total/free, MIG free, NVLink islands, health"
    )
    topo = sub.add_parser(
        "topo", parents=[common], help="a node's GPU link matrix, NUMA and MIG layout"
    )
    topo.add_argument("node", help="node name")
    sub.add_parser("queues", parents=[common], help="the queue tree: GPUs min/max/used/pending")
    queue = sub.add_parser("queue", parents=[common], help="pause or resume a queue")
    queue.add_argument("action", choices=("pause", "resume"))
    queue.add_argument("name", help="Queue name (`root`: the whole scheduler)")
    return parser


# -- views ------------------------------------------------------------------------------------


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


def node_summary(topology: DecodedTopology) -> dict[str, Any]:
    gpus = topology.inventory.gpus
    products = sorted({g.product for g in gpus})
    return {
        "node": topology.node_name,
        "product": ", ".join(products),
        "gpus": len(gpus),
        "free": sum(1 for g in topology.availability.gpus if is_gpu_free(g)),
        "migFree": mig_free(topology),
        "nvlinkIslands": islands(topology),
        "unhealthy": [g.index for g in topology.availability.gpus if not g.healthy],
        "allocationSource": topology.attributes.get(ATTR_SOURCE, ""),
    }


def _health_text(unhealthy: Sequence[int], total: int) -> str:
    if not unhealthy:
        return HEALTHY
    return f"{len(unhealthy)}/{total} {UNHEALTHY} (GPU {format_cpulist(unhealthy)})"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    return "\n".join(lines) + "\n"


def render_nodes(summaries: Sequence[dict[str, Any]]) -> str:
    rows = [
        (
            s["node"],
            s["product"] or "-",
            str(s["gpus"]),
            str(s["free"]),
            ",".join(f"{p}:{n}" for p, n in s["migFree"].items()) or "-",
            " ".join(format_cpulist(i) for i in s["nvlinkIslands"]) or "-",
            _health_text(s["unhealthy"], s["gpus"]),
        )
        for s in summaries
    ]
    return _table(("NODE", "PRODUCT", "GPUS", "FREE", "MIG FREE", "NVLINK ISLANDS", "HEALTH"), rows)


def _counts_text(counts: Sequence[Any]) -> str:
    return (
        ", ".join(f"{r.name.rpartition('/')[2]} {r.available}/{r.allocatable}" for r in counts)
        or "-"
    )


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


def render_topo(topology: DecodedTopology) -> str:
    inv = topology.inventory
    island_of = {i: pos for pos, members in enumerate(islands(topology)) for i in members}
    head = (
        f"Node {topology.node_name}: {len(inv.gpus)} GPUs, driver {inv.driver_version or 'N/A'}, "
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
    parts = [
        head,
        render_topo_matrix(inv),
        render_legend(),
        _table(
            ("NUMA", "CPUS", "CPU FREE/ALLOC", "MEMORY FREE/ALLOC", "GPU FREE/ALLOC", "DISTANCES"),
            _numa_rows(topology),
        ),
        _table(
            ("GPU", "PRODUCT", "UUID", "NUMA", "ISLAND", "HEALTH", "FREE/ALLOCATABLE"), gpu_rows
        ),
    ]
    mig_rows = [(str(g.index), g.mig_layout) for g in inv.gpus if g.mig_devices]
    if mig_rows:
        parts.append(_table(("GPU", "MIG LAYOUT (profile@start:size)"), mig_rows))
    return "\n".join(parts)


def topo_json(topology: DecodedTopology) -> dict[str, Any]:
    inv = topology.inventory
    return {
        **node_summary(topology),
        "matrix": [list(row) for row in inv.links.cells()],
        "gpus": [
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
        ],
        "numa": [
            {"id": n.id, "cpus": n.cpulist, "distances": list(n.distances)} for n in inv.numa_nodes
        ],
        "attributes": dict(topology.attributes),
    }


# -- commands -----------------------------------------------------------------------------------


def cmd_nodes(objects: Sequence[Any], output: str, out: TextIO, err: TextIO) -> int:
    summaries, problems = [], []
    for obj in sorted(objects, key=lambda o: str((o.get("metadata") or {}).get("name", ""))):
        try:
            summaries.append(node_summary(decode(obj)))
        except TopologyDecodeError as exc:
            problems.append({"node": exc.node, "error": str(exc)})
            err.write(f"{PROG}: {exc}\n")
    if output == "json":
        out.write(json.dumps({"nodes": summaries, "errors": problems}, indent=2) + "\n")
    elif summaries:
        out.write(render_nodes(summaries))
    elif not problems:
        err.write(f"{PROG}: no NodeResourceTopology objects found\n")
    return 0


def cmd_topo(obj: Any, node: str, output: str, out: TextIO, err: TextIO) -> int:
    if obj is None:
        err.write(f"{PROG}: no NodeResourceTopology for node {node}\n")
        return 1
    try:
        topology = decode(obj)
    except TopologyDecodeError as exc:
        err.write(f"{PROG}: {exc}\n")
        return 1
    out.write(
        json.dumps(topo_json(topology), indent=2) + "\n"
        if output == "json"
        else render_topo(topology)
    )
    return 0


def render_queues(tree: queues.QueueTree) -> str:
    """One table over every section, so the columns line up; problem sections under headings."""
    sections = [
        (s.problem, [queues.queue_row(d, o, s.unplaced_reason(d)) for d, o in s.entries])
        for s in tree.sections
    ]
    rows = [queues.root_row(tree.root_paused)] + [r for _, rs in sections for r in rs]
    lines = iter(_table(queues.HEADER, rows).splitlines())
    out = [SCHEDULER_PAUSED] if tree.root_paused else []
    out += [next(lines), next(lines)]  # the header and the root
    for problem, section_rows in sections:
        if problem is not None:
            out += ["", f"{problem} (not scheduled):"]
        out += [next(lines) for _ in section_rows]
    return "\n".join(out) + "\n"


def cmd_queues(objects: Sequence[Any] | None, output: str, out: TextIO, err: TextIO) -> int:
    if objects is None:
        err.write(f"{PROG}: {NO_QUEUE_CRD}\n")
        return 1
    tree = queues.build_tree(objects)
    if output == "json":
        out.write(json.dumps(queues.tree_json(tree), indent=2) + "\n")
    elif tree.queue_count:
        out.write(render_queues(tree))
    else:
        out.write(f"{SCHEDULER_PAUSED}\n" * tree.root_paused + NO_QUEUES + "\n")
    return 0


def cmd_queue(sink: KubeSink, action: str, name: str, out: TextIO, err: TextIO) -> int:
    """Merge-patch `spec.paused`; pausing `root` creates that Queue when there is none."""
    paused = action == "pause"
    if sink.patch_queue(name, {"spec": {"paused": paused}}) is None:
        if sink.list_queues() is None:
            err.write(f"{PROG}: {NO_QUEUE_CRD}\n")
            return 1
        if not (paused and name == queues.ROOT):
            err.write(f"{PROG}: queue {name} not found\n")
            return 1
        sink.create_queue({"metadata": {"name": name}, "spec": {"paused": True}})
    out.write(f"queue {name} {'paused' if paused else 'resumed'}\n")
    return 0


def options(args: argparse.Namespace) -> tuple[str | None, str, str]:
    """(kubeconfig, output, log format), defaults filled in."""
    get = args.__dict__.get
    return get("kubeconfig"), get("output", "table"), get("log_format", "text")


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    kubeconfig, output, log_format = options(args)
    logsetup.configure(log_format)
    from agent.kube.client import KubeSink
    from agent.kube.connect import load_api_client

    try:
        sink = KubeSink(load_api_client(kubeconfig))
        if args.command == "nodes":
            return cmd_nodes(sink.list_topologies(), output, out, err)
        if args.command == "queues":
            return cmd_queues(sink.list_queues(), output, out, err)
        if args.command == "queue":
            return cmd_queue(sink, args.action, args.name, out, err)
        return cmd_topo(sink.get_topology(args.node), args.node, output, out, err)
    except AgentError as exc:
        err.write(f"{PROG}: {exc}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
