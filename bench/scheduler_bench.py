"""Placement benchmark: 5,000 to 40,000 nodes × 8 GPUs (issue 46 targets at 40,000 nodes: ≥ 5,000
single-pod decisions/s, p99 ≤ 2 ms, gang p99 ≤ 10 ms, the share mix within 1.2×, RSS < 1 GiB, the
CPU per decision at most 2× that at 5,000 nodes).

Run: `.venv/bin/python bench/scheduler_bench.py [--nodes 5000] [--pods 10000] [--gangs 1000]
[--pairs 5]` for one size in detail, or `--sizes 5000,10000,20000,40000` for one table over the
sizes: each size in its own process (so its RSS is its own peak), with `--pods` (default: twice
the nodes, at most 20,000) single pods, `--gangs` gangs and `--pairs` share pairs; per size the
single pods' decisions/s (wall and CPU), p99, process CPU per decision, the gang p99, the share
mix's decisions per cpu-s and its ratio, and the peak RSS. Each part also prints a digest of
every decision it made (`binds`: pod key and assignment, in order), so two versions of the code
are shown to decide alike.

1. Single pods: a seeded mix (1, 2, 4, 8 whole GPUs, GPU shares, MIG-free, cpu-only) placed one
   by one with the shipped scoring, each bound when placed; decisions/s and cycle-latency
   percentiles over every decision (placed or not).
2. Gangs: on a fresh cluster with `gputopo.io/rack` labels (100 nodes per rack), gangs of 8
   members × 4 GPUs placed all-or-nothing with `topology-preferred: gputopo.io/rack`; latency
   per attempt. Placement is pure, so wall time here is placement time.
3. GPU shares (DESIGN §12): on a fresh cluster whose nodes are 40 % time-sliced (4 replicas of
   `nvidia.com/gpu.shared` per 80 GiB GPU), the single-pod mix alone, then with 40 % of the pods
   share pods by memory (10, 20 or 40 GiB; compute 25 or 50 % or none); the target is the share
   mix within 1.2× of the other's decisions per cpu-second. The two mixes of a pair run in two
   processes in lockstep, 50 decisions each in turn (the first alternating), so a slow spell of
   a shared machine falls on both alike (two runs one after the other differed by up to ±15 %);
   each process has its own heap and collector. The ratio also moves a few per cent with the
   string hash seed (dict layouts), so `--pairs` (default 5) pairs run with seeds 1, 2, ...,
   and the median is the figure.

Decisions are made as the scheduler makes them, through a `Placer` with the shipped scoring.
`--plain` sets the scoring's candidate limit above the node count: every node is still ranked
(the same decisions), but the Placer takes its plain path, for comparison.

Both wall-clock and process CPU time are reported: on a shared machine wall time includes time
the process waited for a core, CPU time does not.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.shares import SHARED_GPU_RESOURCE, ContainerShare
from scheduler.cli.startgc import StartupGc
from scheduler.config import load_config
from scheduler.placement import PodRequest, Scoring, TopologyConstraint
from scheduler.sim.cluster import Cluster, NodeSpec

GIB = 1 << 30


def make_cluster(nodes: int, racks: int, shared: float = 0.0) -> Cluster:
    """`shared`: the share of nodes (every fifth, two in five for 0.4) whose GPUs are shared."""
    per_rack = max(1, nodes // max(1, racks))
    return Cluster.from_specs(
        NodeSpec(
            name=f"node-{i:05d}",
            labels={"gputopo.io/rack": f"rack-{i // per_rack:03d}"},
            shares=4 if i % 100 < shared * 100 else 0,
        )
        for i in range(nodes)
    )


def share_pod(rng: random.Random, key: str) -> PodRequest:
    """A share pod as the scheduler reads one: a replica, memory and maybe compute."""
    ask = ContainerShare(
        container="main",
        init=False,
        resource=SHARED_GPU_RESOURCE,
        replicas=1,
        memory_bytes=rng.choice((10, 20, 40)) * GIB,
        compute_percent=rng.choice((None, 25, 50)),
    )
    cpu, mem = rng.choice((1000, 4000)), rng.choice((4, 16)) * GIB
    extended = {SHARED_GPU_RESOURCE: 1}
    return PodRequest(key=key, cpu_milli=cpu, memory=mem, extended=extended, shares=(ask,))


def random_pod(rng: random.Random, key: str) -> PodRequest:
    kind = rng.random()
    cpu, mem = rng.choice((1000, 4000, 8000)), rng.choice((4, 16, 64)) * GIB
    if kind < 0.10:
        return PodRequest(key=key, cpu_milli=cpu, memory=mem)
    if kind < 0.20:
        return PodRequest(key=key, cpu_milli=cpu, memory=mem, gpu_milli=rng.choice((250, 500)))
    gpus = rng.choices((1, 2, 4, 8), weights=(50, 20, 15, 5))[0]
    return PodRequest(key=key, cpu_milli=cpu, memory=mem, gpus=gpus)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Clock:
    """Wall and CPU latency samples of repeated calls, and a digest of what they decided
    (`record`, off the clock), so two versions of the code can be shown to decide alike."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._binds = hashlib.sha256()

    def record(self, key: str, outcome: object) -> None:
        """Add one pod's outcome (its assignment, or None) to the digest."""
        self._binds.update(f"{key}={outcome!r};".encode())

    def __call__(self, fn: Callable[[], object]) -> object:
        w0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        self.wall.append(time.perf_counter() - w0)
        self.cpu.append(time.process_time() - c0)
        return result

    def row(self, placed: int) -> dict[str, float | str]:
        count = len(self.wall)
        return {
            "binds": self._binds.hexdigest()[:12],
            "rate/s": count / max(1e-9, sum(self.wall)),
            "rate/cpu-s": count / max(1e-9, sum(self.cpu)),
            "p50 ms": percentile(self.wall, 0.50) * 1000,
            "p99 ms": percentile(self.wall, 0.99) * 1000,
            "p99 cpu ms": percentile(self.cpu, 0.99) * 1000,
            "max ms": max(self.wall, default=0.0) * 1000,  # (none: `--gangs 0`)
            "placed": placed,
        }


@contextmanager
def warm_heap_frozen() -> Iterator[None]:
    """The collector as the scheduler sets it once its cache is warm (`StartupGc`): what was built
    before the clock starts frozen, so the collector's full passes do not walk it, and full passes
    rarer (`STEADY_THRESHOLDS`); as before after."""
    gc.collect()
    collector = StartupGc()
    collector.pause()
    collector.synced()
    try:
        yield
    finally:
        collector.release()


def shipped_scoring(nodes: int, plain: bool) -> Scoring:
    """The shipped scoring; with `plain` (and every node ranked), a candidate limit above `nodes`:
    still every node ranked, by the Placer's plain path."""
    scoring = load_config().scoring()
    if plain and scoring.candidate_limit == 0:
        return replace(scoring, candidate_limit=nodes + 1)
    return scoring


def bench_pods(
    nodes: int,
    pods: int,
    seed: int,
    plain: bool,
    shared: float = 0.0,
    shares: float = 0.0,
    turn: Callable[[int, bool], None] | None = None,
) -> dict[str, float | str]:
    """Single pods; `shared` of the nodes time-sliced, `shares` of the pods share pods.
    `turn(i, before)`: called before and after decision `i`, off the clock (`lockstep_child`)."""
    cluster = make_cluster(nodes, 50, shared)
    scoring = shipped_scoring(nodes, plain)
    cluster.placer(scoring)  # built before the clock starts, as the scheduler builds it at start
    rng = random.Random(seed)
    clock, placed = Clock(), 0
    with warm_heap_frozen():
        for i in range(pods):
            key = f"default/pod-{i}"
            pod = share_pod(rng, key) if rng.random() < shares else random_pod(rng, key)
            if turn is not None:
                turn(i, True)
            decision = clock(partial(cluster.place, pod, scoring))
            if turn is not None:
                turn(i, False)
            assignment = getattr(decision, "assignment", None)
            clock.record(key, assignment)
            placed += assignment is not None
    return clock.row(placed)


def bench_gangs(nodes: int, gangs: int, seed: int, plain: bool) -> dict[str, float | str]:
    cluster = make_cluster(nodes, 50)
    scoring = shipped_scoring(nodes, plain)
    cluster.placer(scoring)  # built before the clock starts, as the scheduler builds it at start
    rng = random.Random(seed)
    topology = TopologyConstraint(label="gputopo.io/rack", required=False)
    clock, placed = Clock(), 0
    with warm_heap_frozen():
        for g in range(gangs):
            members = [
                PodRequest(
                    key=f"default/gang-{g}-{m}",
                    cpu_milli=4000,
                    memory=64 * GIB,
                    gpus=4,
                    pod_group=f"gang-{g}",
                )
                for m in range(8)
            ]
            rng.shuffle(members)
            place = partial(cluster.place_gang, members, scoring, topology=topology)
            result = clock(place)
            clock.record(f"gang-{g}", sorted(getattr(result, "assignments", {}).items()))
            placed += bool(getattr(result, "ok", False))
    return clock.row(placed)


_BLOCK = 50  # decisions a lockstep child makes per turn (about 30 ms)


def lockstep_child(args: argparse.Namespace) -> None:
    """One mix of a lockstep pair: each block of `_BLOCK` decisions waits for the parent's go
    (a byte on stdin) and says when it is done (a byte on stdout); the row comes last, as JSON."""
    shares = 0.4 if args.lockstep == "shares" else 0.0

    def turn(i: int, before: bool) -> None:
        if before and i % _BLOCK == 0:
            os.read(0, 1)
        elif not before and (i % _BLOCK == _BLOCK - 1 or i == args.pods - 1):
            os.write(1, b".")

    row = bench_pods(args.nodes, args.pods, args.seed, args.plain, 0.4, shares, turn)
    os.write(1, json.dumps(row).encode())


def share_pair(args: argparse.Namespace, hash_seed: int) -> dict[str, dict[str, float | str]]:
    """The mix on 40 % shared nodes without and with 40 % share pods, each in its own process
    (string hash seed `hash_seed`), taking turns of `_BLOCK` decisions, which of the two goes
    first alternating: a slow spell of the machine falls on both alike, and a turn is long
    enough that the caches the other process cooled cost little."""
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    command = [sys.executable, __file__, "--nodes", str(args.nodes), "--pods", str(args.pods)]
    command += ["--seed", str(args.seed), *(["--plain"] if args.plain else [])]
    children = {
        name: subprocess.Popen(
            [*command, "--lockstep", name], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for name in ("mixed", "shares")
    }
    pipes = [(c.stdin, c.stdout) for c in children.values() if c.stdin and c.stdout]
    for block in range(-(-args.pods // _BLOCK)):
        for go, done in pipes if block % 2 else pipes[::-1]:
            go.write(b"g")
            go.flush()
            if done.read(1) != b".":
                raise RuntimeError("a lockstep child stopped early")
    rows = {name: json.loads(c.communicate()[0]) for name, c in children.items()}
    for name, child in children.items():
        if child.returncode:
            raise RuntimeError(f"the lockstep child {name} failed ({child.returncode})")
    return rows


def share_pairs(args: argparse.Namespace) -> list[dict[str, dict[str, float | str]]]:
    """`args.pairs` lockstep pairs, with string hash seeds 1, 2, ..."""
    return [share_pair(args, k) for k in range(1, args.pairs + 1)]


def size_row(args: argparse.Namespace) -> dict[str, float | str]:
    """One size's figures (`--row`): single pods, gangs, the share pairs' median, peak RSS."""
    pods = bench_pods(args.nodes, args.pods, args.seed, args.plain)
    gangs = bench_gangs(args.nodes, args.gangs, args.seed, args.plain)
    pairs = share_pairs(args)
    ratios = [p["mixed"]["rate/cpu-s"] / max(1e-9, p["shares"]["rate/cpu-s"]) for p in pairs]
    middle = sorted(range(len(pairs)), key=lambda i: ratios[i])[len(pairs) // 2]
    return {
        "nodes": args.nodes,
        "pods": args.pods,
        "rate/s": pods["rate/s"],
        "rate/cpu-s": pods["rate/cpu-s"],
        "p99 ms": pods["p99 ms"],
        "p99 cpu ms": pods["p99 cpu ms"],
        "cpu us": 1e6 / max(1e-9, pods["rate/cpu-s"]),
        "gang p99 ms": gangs["p99 ms"],
        "gang p99 cpu ms": gangs["p99 cpu ms"],
        "share/cpu-s": pairs[middle]["shares"]["rate/cpu-s"],
        "ratio": statistics.median(ratios),
        "rss MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "binds": f"pods {pods['binds']}, gangs {gangs['binds']}, shares {shares_digest(pairs)}",
    }


def shares_digest(pairs: Sequence[dict[str, dict[str, float | str]]]) -> str:
    """The share pairs' bind digests: one when every pair's mixes decided alike."""
    digests = sorted({f"{p['mixed']['binds']}/{p['shares']['binds']}" for p in pairs})
    return " ".join(digests)


_TABLE = (
    ("nodes", "nodes", "{:>8.0f}"),
    ("pods", "pods", "{:>8.0f}"),
    ("pods/s", "rate/s", "{:>9.0f}"),
    ("pods/cpu-s", "rate/cpu-s", "{:>11.0f}"),
    ("p99 ms", "p99 ms", "{:>8.2f}"),
    ("p99 cpu", "p99 cpu ms", "{:>8.2f}"),
    ("cpu µs/pod", "cpu us", "{:>11.0f}"),
    ("gang p99", "gang p99 ms", "{:>9.2f}"),
    ("gang cpu", "gang p99 cpu ms", "{:>9.2f}"),
    ("share/cpu-s", "share/cpu-s", "{:>12.0f}"),
    ("ratio", "ratio", "{:>6.2f}"),
    ("RSS MB", "rss MB", "{:>7.0f}"),
)


def size_table(args: argparse.Namespace) -> None:
    """`--sizes`: each size in its own process (`--row`), one table."""
    rows = []
    for nodes in (int(n) for n in args.sizes.split(",") if n):
        pods = args.pods or min(20_000, 2 * nodes)
        command = [sys.executable, __file__, "--nodes", str(nodes), "--pods", str(pods), "--row"]
        command += [
            "--gangs",
            str(args.gangs),
            "--pairs",
            str(args.pairs),
            "--seed",
            str(args.seed),
        ]
        command += ["--plain"] if args.plain else []
        rows.append(json.loads(subprocess.run(command, check=True, capture_output=True).stdout))
    print("".join(f"{head:>{len(fmt.format(0))}}" for head, _key, fmt in _TABLE))
    for row in rows:
        print("".join(fmt.format(row[key]) for _head, key, fmt in _TABLE))
    print(
        "binds (digests of every decision): "
        + "; ".join(f"{r['nodes']:.0f}: {r['binds']}" for r in rows)
    )
    base = rows[0]["cpu us"]
    print(
        "cpu per decision vs the first size: "
        + ", ".join(f"{r['nodes']:.0f}: {r['cpu us'] / base:.2f}×" for r in rows)
    )
    print(
        "targets at 40,000 nodes: ≥ 5,000 pods/s, p99 ≤ 2 ms, gang p99 ≤ 10 ms, ratio ≤ 1.2, "
        "RSS < 1 GiB, cpu per decision ≤ 2× that at 5,000 nodes (share/cpu-s and ratio: the "
        "pair with the median ratio, 40 % of the nodes shared and 40 % share pods)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--sizes", help="comma-separated node counts: one table over them")
    parser.add_argument("--row", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pods", type=int, default=0, help="default 10,000 (--sizes: 2 × nodes)")
    parser.add_argument("--gangs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--pairs", type=int, default=5, help="share-ratio pairs (hash seeds)")
    parser.add_argument("--lockstep", choices=("mixed", "shares"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--mix",
        choices=("mixed", "shares"),
        help="one mix of a share pair alone in this process, no lockstep: to count its "
        "instructions (README: under valgrind --tool=cachegrind, less a run with --pods 1)",
    )
    parser.add_argument(
        "--plain", action="store_true", help="rank every node on the Placer's plain path"
    )
    args = parser.parse_args(argv)
    if args.sizes:
        size_table(args)
        return 0
    args.pods = args.pods or 10_000
    if args.lockstep:  # one mix of a share-ratio pair, for the parent process
        lockstep_child(args)
        return 0
    if args.mix:
        shares = 0.4 if args.mix == "shares" else 0.0
        print(json.dumps(bench_pods(args.nodes, args.pods, args.seed, args.plain, 0.4, shares)))
        return 0
    if args.row:  # one size of the table, for the parent process
        print(json.dumps(size_row(args)))
        return 0
    build = timed(lambda: make_cluster(args.nodes, 50))
    how = "the plain path" if args.plain else "the shipped scoring"
    print(f"cluster: {args.nodes} nodes × 8 GPUs, built in {build:.2f} s; Placer with {how}")
    pods = bench_pods(args.nodes, args.pods, args.seed, args.plain)
    gangs = bench_gangs(args.nodes, args.gangs, args.seed, args.plain)
    pairs = share_pairs(args)
    ratios = [p["mixed"]["rate/cpu-s"] / max(1e-9, p["shares"]["rate/cpu-s"]) for p in pairs]
    middle = sorted(range(len(pairs)), key=lambda i: ratios[i])[len(pairs) // 2]
    rows = [
        (f"single pods ({args.pods})", pods),
        (f"gangs of 8 × 4 GPUs ({args.gangs})", gangs),
        ("40% nodes shared: no share pods", pairs[middle]["mixed"]),
        ("40% nodes shared: 40% shares", pairs[middle]["shares"]),
    ]
    columns = ("rate/s", "rate/cpu-s", "p50 ms", "p99 ms", "p99 cpu ms", "max ms", "placed")
    print(f"{'benchmark':<32}" + "".join(f"{c:>12}" for c in columns))
    for name, r in rows:
        print(f"{name:<32}" + "".join(f"{r[c]:>12.2f}" for c in columns))
    print("targets: single pods ≥ 1,000 decisions/s and p99 ≤ 10 ms; gang p99 ≤ 10 ms per attempt")
    print(f"(the two shared rows: the pair with the median ratio, of {len(pairs)})")
    for k, (pair, ratio) in enumerate(zip(pairs, ratios, strict=True), start=1):
        mixed, shares = pair["mixed"]["rate/cpu-s"], pair["shares"]["rate/cpu-s"]
        print(f"  pair {k} (hash seed {k}): {mixed:.0f} / {shares:.0f} = {ratio:.2f}")
    print(
        "shares: decisions per cpu-s without / with 40% share pods, median of the pairs = "
        f"{statistics.median(ratios):.2f} (target ≤ 1.2)"
    )
    print(
        f"binds (digests of every decision): pods {pods['binds']}, gangs {gangs['binds']}, "
        f"shares {shares_digest(pairs)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
