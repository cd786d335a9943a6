"""`kubectl gputopo` (installed as `kubectl-gputopo`): GPU capacity and topology from the nodes'
NodeResourceTopology objects, the scheduler's queues, and the gangs of both PodGroup APIs.

    kubectl gputopo nodes            per node: product, GPUs, whole GPUs free, GPUs in MIG mode and
                                     free MIG slices by profile, NVLink islands, health
    kubectl gputopo topo NODE        the `nvidia-smi topo -m` matrix with its legend, NUMA and MIG
    kubectl gputopo queues           the Queue tree: GPUs min, max, used, borrowed, pending, fair
                                     share, and each queue's state
    kubectl gputopo queue pause|resume NAME
                                     set the Queue's spec.paused (`root`: the whole scheduler)
    kubectl gputopo gangs [-n NS | -A]
                                     one row per gang, ours (scheduling.x-k8s.io PodGroups) and
                                     upstream (scheduling.k8s.io): minimum, members seen, bound,
                                     pending, topology key, status
    --kubeconfig PATH, --context NAME, -o table|json|yaml, --log-format text|json, --version

With no arguments it lists its commands. An object gputopo cannot read (another producer's, or a
damaged one) gives one line naming the node and the field, on stderr; the other nodes are still
shown. Exit codes: 0 done, 1 the cluster could not be read (the node has no object, the queue does
not exist, the Queue CRD is not installed, the API server is unreachable), 2 bad usage.

This module and what it imports need only the base install (the `kubernetes` client and PyYAML):
never grpc, numpy or NVML (tests/unit/agent/cli/test_kubectl_imports.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from agent import logsetup
from agent.cli import kubectl_gangs as gangs
from agent.cli import kubectl_queues as queues
from agent.cli.kubectl_dra import ClaimLister, holds_data, holds_table, node_holds
from agent.cli.kubectl_nodes import (
    node_summary,
    render_nodes,
    render_topo,
    share_rows,
    shared_gpus,
    table,
    topo_data,
)
from agent.dispatch import CommandParser, version_line
from agent.errors import AgentError, TopologyDecodeError
from agent.nrt import DecodedTopology, decode
from agent.share_usage import annotated_shares

if TYPE_CHECKING:
    from agent.kube.client import KubeSink

PROG = "kubectl-gputopo"
DEFAULT_NAMESPACE = "default"
OUTPUTS = ("table", "json", "yaml")
NO_QUEUE_CRD = "the Queue CRD (queues.scheduling.gputopo.io) is not installed"
SCHEDULER_PAUSED = "scheduler paused: queue root has spec.paused, nothing new starts"
NO_QUEUES = (
    "no queues: every pod uses the default queue; create one with `kubectl apply -f` on a Queue "
    "(apiVersion scheduling.gputopo.io/v1alpha1, spec.min/max, e.g. nvidia.com/gpu: 8)"
)


def build_parser() -> argparse.ArgumentParser:
    """Global flags go before or after the subcommand; `options(args)` fills in their defaults."""
    common = CommandParser(add_help=False)
    common.add_argument(
        "--kubeconfig",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="kubeconfig file (default: $KUBECONFIG, else in a pod its service account, else "
        "~/.kube/config)",
    )
    common.add_argument(
        "--context",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help="kubeconfig context to use (default: the current context)",
    )
    common.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=argparse.SUPPRESS,
        help="output format (default: table)",
    )
    common.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=argparse.SUPPRESS,
        help="log line format on stderr (default: text)",
    )
    common.add_argument("--version", action="version", version=version_line(PROG))
    parser = CommandParser(
        prog="kubectl gputopo", description=__doc__.split("\n\n")[0], parents=[common]
    )
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        title="commands",
        parser_class=CommandParser,
    )
    sub.add_parser(
        "nodes",
        parents=[common],
        help="GPUs, whole GPUs free, MIG GPUs and free slices, NVLink islands, health",
    )
    topo = sub.add_parser(
        "topo", parents=[common], help="a node's GPU link matrix, NUMA and MIG layout"
    )
    topo.add_argument("node", help="node name")
    sub.add_parser("queues", parents=[common], help="the queue tree: GPUs min/max/used/pending")
    queue = sub.add_parser("queue", parents=[common], help="pause or resume a queue")
    queue.add_argument("action", choices=("pause", "resume"), help="pause or resume")
    queue.add_argument("name", help="Queue name (`root`: the whole scheduler)")
    gang_parser = sub.add_parser(
        "gangs",
        parents=[common],
        help="gangs (both PodGroup APIs): minimum, members, bound, pending, topology, status",
    )
    scope = gang_parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="namespace (default: the kubeconfig context's, as kubectl's, else default)",
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="the gangs of every namespace"
    )
    return parser


def emit(data: Any, output: str, out: TextIO) -> None:
    """`data` as JSON or YAML (`-o json|yaml`)."""
    if output == "yaml":
        out.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        out.write(json.dumps(data, indent=2) + "\n")


# -- commands -----------------------------------------------------------------------------------


def cmd_nodes(objects: Sequence[Any], output: str, out: TextIO, err: TextIO) -> int:
    summaries, problems = [], []
    for obj in sorted(objects, key=lambda o: str((o.get("metadata") or {}).get("name", ""))):
        try:
            summaries.append(node_summary(decode(obj)))
        except TopologyDecodeError as exc:
            problems.append({"node": exc.node, "error": str(exc)})
            err.write(f"{PROG}: {exc}\n")
    if output != "table":
        emit({"nodes": summaries, "errors": problems}, output, out)
    elif summaries:
        out.write(render_nodes(summaries))
    elif not problems:
        err.write(f"{PROG}: no NodeResourceTopology objects found\n")
    return 0


def cmd_topo(
    obj: Any,
    node: str,
    output: str,
    out: TextIO,
    err: TextIO,
    pods: Callable[[], list[dict[str, Any]]] | None = None,
    claims: ClaimLister | None = None,
) -> int:
    """`pods` lists the node's pods, for the per-pod shares of shared GPUs; `claims` every
    ResourceClaim, for the GPUs DRA claims hold."""
    if obj is None:
        err.write(f"{PROG}: no NodeResourceTopology for node {node}\n")
        return 1
    try:
        topology = decode(obj)
    except TopologyDecodeError as exc:
        err.write(f"{PROG}: {exc}\n")
        return 1
    shares = _pod_shares(topology, pods, err)
    holds = node_holds(topology.inventory, node, claims, PROG, err)
    if output == "table":
        out.write(render_topo(topology, shares) + holds_table(holds))
    else:
        emit({**topo_data(topology, shares), "draClaims": holds_data(holds)}, output, out)
    return 0


def _pod_shares(
    topology: DecodedTopology, pods: Callable[[], list[dict[str, Any]]] | None, err: TextIO
) -> list[dict[str, Any]] | None:
    shared = shared_gpus(topology)
    if not shared:
        return []
    if pods is None:
        return None
    try:
        listed = pods()
    except AgentError as exc:
        err.write(f"{PROG}: per-pod shares not shown: {exc}\n")
        return None
    return share_rows(topology, annotated_shares(topology.inventory, shared, listed))


def render_queues(tree: queues.QueueTree) -> str:
    """One table over every section, so the columns line up; problem sections under headings."""
    sections = [
        (
            s.problem,
            [r for d, o in s.entries for r in queues.queue_rows(d, o, s.unplaced_reason(d))],
        )
        for s in tree.sections
    ]
    rows = [queues.root_row(tree.root_paused)] + [r for _, rs in sections for r in rs]
    lines = iter(table(queues.HEADER, rows).splitlines())
    out = [SCHEDULER_PAUSED] if tree.root_paused else []
    out += [next(lines), next(lines)]  # the header and the root
    for problem, section_rows in sections:
        if problem is not None:
            out += ["", f"{problem} (not scheduled):"]
        out += [next(lines) for _ in section_rows]
    invalid = [
        f"  queue {queues.name_of(o)}: {p}"
        for s in tree.sections
        for _, o in s.entries
        for p in queues.key_problems(o)
    ]
    if invalid:
        out += ["", "Invalid keys (the scheduler refuses these queues):", *invalid]
    return "\n".join(out) + "\n"


def cmd_queues(objects: Sequence[Any] | None, output: str, out: TextIO, err: TextIO) -> int:
    if objects is None:
        err.write(f"{PROG}: {NO_QUEUE_CRD}\n")
        return 1
    tree = queues.build_tree(objects)
    if output != "table":
        emit(queues.tree_json(tree), output, out)
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


def cmd_gangs(
    ours: Sequence[Any] | None,
    upstream: tuple[str, Sequence[Any]] | None,
    pods: Sequence[Any],
    namespace: str | None,
    output: str,
    out: TextIO,
    err: TextIO,
    composites: Sequence[Any] | None = None,
) -> int:
    """`ours`: our PodGroups (None: the CRD is not installed); `upstream`: (apiVersion, the
    scheduling.k8s.io PodGroups), None when the server does not serve them; `composites`: the
    CompositePodGroups (None: not served)."""
    api, listed = upstream if upstream is not None else (None, None)
    found = gangs.build_gangs(ours, listed, api, pods, composites)
    if output != "table":
        emit({"gangs": [gangs.gang_json(g) for g in found]}, output, out)
    elif found:
        out.write(table(gangs.HEADER, [gangs.gang_row(g) for g in found]))
    else:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        err.write(f"{PROG}: no gangs in {where}\n")
    return 0


def options(args: argparse.Namespace) -> tuple[str | None, str | None, str, str]:
    """(kubeconfig, context, output, log format), defaults filled in."""
    get = args.__dict__.get
    return get("kubeconfig"), get("context"), get("output", "table"), get("log_format", "text")


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    arguments = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if not arguments:  # like the other commands: the usage and the command list, exit 2
        out.write(parser.format_help())
        return 2
    args = parser.parse_args(arguments)
    kubeconfig, context, output, log_format = options(args)
    logsetup.configure(log_format)
    from agent.kube.client import KubeSink
    from agent.kube.connect import context_namespace, load_api_client

    try:
        sink = KubeSink(load_api_client(kubeconfig, context))
        if args.command == "nodes":
            return cmd_nodes(sink.list_topologies(), output, out, err)
        if args.command == "queues":
            return cmd_queues(sink.list_queues(), output, out, err)
        if args.command == "queue":
            return cmd_queue(sink, args.action, args.name, out, err)
        if args.command == "gangs":
            namespace = None if args.all_namespaces else args.namespace
            if namespace is None and not args.all_namespaces:
                namespace = context_namespace(kubeconfig, context)
            ours = sink.list_podgroups(namespace)
            upstream = sink.list_upstream_podgroups(namespace)
            members = sink.list_pods(namespace)
            trees = sink.list_composites(namespace) if upstream is not None else None
            return cmd_gangs(ours, upstream, members, namespace, output, out, err, trees)
        pods = lambda: sink.node_pods(args.node)  # noqa: E731
        topology = sink.get_topology(args.node)
        return cmd_topo(topology, args.node, output, out, err, pods, sink.list_claims)
    except AgentError as exc:
        err.write(f"{PROG}: {exc}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
