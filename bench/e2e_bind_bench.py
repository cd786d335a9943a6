"""End-to-end scheduler benchmark (not a test): watch -> decide -> bind against the fake API server.

The fake API server (real HTTP) runs in a child process with N ready GPU nodes; this process runs
the real scheduler `Runtime` (informers, cache, queue, loop, binder, reporter) with the real
`kubernetes` client. Once the scheduler's cache is warm, the child stores P pending pods at once;
the clock runs from then until the scheduler has bound all P (its own count of `201` answers),
and the child then checks that every pod is bound and no node holds more GPUs than it has.

    .venv/bin/python bench/e2e_bind_bench.py [--nodes 1000] [--pods 2000] [--json] [--root DIR]
    .venv/bin/python bench/e2e_bind_bench.py --compare BASE_DIR [--runs 3] [--nodes N] [--pods P]

Prints bound pods per second, the time to the first and the last bind, the scheduler process's
CPU time over that span (on a shared machine wall time includes waiting for a core) and per
bound pod, and the scheduler's attempt counts. The CPU is broken down by thread, read from each
thread's own CPU clock at both ends of the span (nothing is timed inside the scheduler):

    decode  the informer threads: read the watch streams, parse JSON, read each pod into a
            `PodInfo`, update the cache and the queue
    decide  the scheduling loop: pop, decide, assume, hand the binds over
    bind    the bind workers: send each binding (and hand the `Scheduled` event over)
    report  the reporter's workers: Events and `PodScheduled=False` writes
    other   the rest of the process (this benchmark's own polling, the metrics server)

`--start` stores the pods before the scheduler starts and measures from its start (a restart
or a failover with work waiting): the time to the first bind and its parts (when each collection
was listed and built into the cache, when every informer synced, the first cycle), pods/s from
the start and between the first and the last bind; the CPU then includes the start.

`--root DIR` runs the scheduler (and the fake API server) of another checkout, so one harness
measures two commits; `--compare BASE_DIR` runs base and this checkout alternately, `--runs`
times each, each in a fresh process, and prints every run (with the machine's 1-minute load
average when it began) and the medians.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

GPU = "nvidia.com/gpu"
SCHEDULER = "gputopo-scheduler"
SIZES = (1, 2, 4, 1, 1, 2)  # GPUs per pod, cycled


def _pod(i: int) -> dict[str, Any]:
    return pod_object(f"bench-{i:05d}", SIZES[i % len(SIZES)])


def pod_object(name: str, gpus: int) -> dict[str, Any]:
    """A pending pod `name` of this scheduler asking `gpus` GPUs, 1 cpu and 2Gi."""
    resources = {GPU: str(gpus), "cpu": "1", "memory": "2Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"limits": resources, "requests": resources},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def _check(fake: Any, pods: int) -> dict[str, Any]:
    used: dict[str, int] = {}
    bound = 0
    for pod in fake.list_objects("pods", "default"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            bound += 1
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            used[node] = used.get(node, 0) + int(limits[GPU])
    over = sorted(n for n, g in used.items() if g > 8)
    check = {"bound": bound, "expected": pods, "overcommittedNodes": over, "nodesUsed": len(used)}
    claims = fake.list_objects("resourceclaims", "default")
    if claims:  # --dra: every pod's GPUs are its made claim's devices, none held twice
        held = [
            (r["pool"], r["device"])
            for c in claims
            for r in ((c.get("status") or {}).get("allocation") or {})
            .get("devices", {})
            .get("results", ())
        ]
        check |= {"claims": len(claims), "devicesHeldTwice": len(held) - len(set(held))}
        check["devicesHeld"] = len(held)
    return check


def fake_with_nodes(nodes: int, history_limit: int, dra: bool = False) -> Any:
    """A started fake API server with `nodes` ready 8-GPU nodes (named out of order). `dra`:
    each node's GPUs in a ResourceSlice (a UUID of its own each) and none in its allocatable,
    and a DeviceClass mapping `nvidia.com/gpu` to them (KEP-5004)."""
    from tests.builders.claims import class_obj, gpu_device, slice_obj
    from tests.fakeapi import FakeApiServer

    fake = FakeApiServer(history_limit=history_limit).start()
    capacity = {"cpu": "128", "memory": "1Ti", "pods": "110", GPU: "0" if dra else "8"}
    if dra:
        mapping = class_obj()
        mapping["spec"]["extendedResourceName"] = GPU
        fake.put_object("deviceclasses", mapping)
    for i in range(nodes):
        name = f"node-{(i * 7919) % nodes:04d}"
        fake.add_node(name, capacity=capacity)
        if dra:
            devices = [gpu_device(minor) for minor in range(8)]
            for minor, device in enumerate(devices):
                device["attributes"]["uuid"] = {"string": f"GPU-{name}-{minor}"}
            fake.put_object("resourceslices", slice_obj(name, devices))
    return fake


def serve_fake(nodes: int, conn: Connection) -> None:
    """The child: a fake API server with `nodes` ready 8-GPU nodes, driven through `conn`."""
    _serve(fake_with_nodes(nodes, 200_000), conn)


def serve_fake_dra(nodes: int, conn: Connection) -> None:
    """`serve_fake` with the nodes' GPUs on DRA alone (`fake_with_nodes(dra=True)`)."""
    _serve(fake_with_nodes(nodes, 200_000, dra=True), conn)


def _serve(fake: Any, conn: Connection) -> None:
    conn.send(fake.port)
    while True:
        command, arg = conn.recv()
        if command == "pods":
            for i in range(arg):
                fake.put_object("pods", _pod(i))
            conn.send("created")
        elif command == "check":
            conn.send(_check(fake, arg))
        else:
            fake.stop()
            conn.send("stopped")
            return


def _runtime(port: int) -> Any:
    from kubernetes import client

    from scheduler.cli.runtime import Runtime
    from scheduler.cli.settings import RunSettings
    from scheduler.config import load_config
    from scheduler.kubeapi.client import KubeClient

    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.connection_pool_maxsize = 32
    kube = KubeClient(client.ApiClient(configuration), SCHEDULER, "bench")
    settings = RunSettings(
        kubeconfig=None,
        config=load_config(None),
        scheduler_name=SCHEDULER,
        leader_elect=False,
        leader_elect_namespace="default",
        metrics_address="127.0.0.1:0",
        log_format="text",
    )
    if "pause_gc" in inspect.signature(Runtime).parameters:  # as the `run` command starts it
        return Runtime(settings, kube, pause_gc=True)
    return Runtime(settings, kube)


def _wait(predicate: Any, timeout: float, interval: float = 0.005) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(interval)
    return None


PARTS = ("decode", "decide", "bind", "report")
_PART_OF_PREFIX = (
    ("informer-", "decode"),
    ("scheduler-loop", "decide"),
    ("bind", "bind"),
    ("report", "report"),
)


def _part(thread_name: str) -> str:
    for prefix, part in _PART_OF_PREFIX:
        if thread_name.startswith(prefix):
            return part
    return "other"


def thread_cpu() -> dict[int, tuple[str, float]]:
    """Thread id -> (name, CPU seconds so far) for every live thread, from its own CPU clock."""
    out: dict[int, tuple[str, float]] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # it ended between enumerate() and now
            continue
        out[thread.ident] = (thread.name, seconds)
    return out


def breakdown(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], total: float
) -> dict[str, float]:
    """CPU seconds per part over the span; `other` is the process's `total` less the parts (a
    thread started during the span counts from zero)."""
    parts = dict.fromkeys(PARTS, 0.0)
    for ident, (name, seconds) in after.items():
        part = _part(name)
        if part != "other":
            parts[part] += seconds - before.get(ident, (name, 0.0))[1]
    parts["other"] = max(0.0, total - sum(parts.values()))
    return parts


def _counter(metric: Any, result: str) -> float:
    """One labelled counter's value, from that metric alone (the registry-wide collect also
    evaluates the pending-pods callback, which walks every pod under the cache lock)."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels.get("result") == result:
                return float(sample.value)
    return 0.0


def _bind_span(runtime: Any, parent: Connection, pods: int, timeout: float) -> dict[str, Any]:
    """Store the pods and measure until the scheduler has bound them all."""

    def bound() -> float:
        return _counter(runtime.metrics.binds, "bound")

    start, cpu_start, threads_start = time.monotonic(), time.process_time(), thread_cpu()
    parent.send(("pods", pods))
    first = _wait(lambda: bound() >= 1, timeout, 0.001)
    last = _wait(lambda: bound() >= pods, timeout)
    cpu, threads_end = time.process_time() - cpu_start, thread_cpu()
    elapsed = time.monotonic() - start if last is not None else None
    parent.recv()
    return {
        "elapsed": elapsed,
        "first": first,
        "cpu": cpu,
        "parts": breakdown(threads_start, threads_end, cpu),
    }


def _metrics(runtime: Any) -> dict[str, Any]:
    sample = runtime.metrics.registry.get_sample_value
    attempts = {
        r: sample("gputopo_scheduler_schedule_attempts_total", {"result": r}) or 0.0
        for r in ("scheduled", "unschedulable", "error")
    }
    cycle = "gputopo_scheduler_scheduling_cycle_duration_seconds"
    cycles = sample(f"{cycle}_count") or 1.0
    return {"attempts": attempts, "meanCycleMs": 1000 * (sample(f"{cycle}_sum") or 0.0) / cycles}


def _timed_start(runtime: Any) -> dict[str, Any]:
    """Wrap the informers' list calls and the cache's list intake (instance attributes, so any
    checkout's `Runtime` can be measured) to record each collection's list and cache build:
    [wall seconds, ended at (from the start)]; `t0` is set when the clock starts."""
    stamps: dict[str, Any] = {"t0": 0.0, "list": {}, "build": {}}

    def timed(record: dict[str, Any], name: str, call: Any, *args: Any) -> Any:
        begin = time.monotonic()
        out = call(*args)
        end = time.monotonic()
        spent = record.get(name, [0.0])[0] + end - begin
        record[name] = [round(spent, 3), round(end - stamps["t0"], 3)]
        return out

    kube, scheduler = runtime.kube, runtime.scheduler
    kube.list = _by_kind(timed, stamps["list"], type(kube).list.__get__(kube))
    bound = type(scheduler).replace.__get__(scheduler)
    scheduler.replace = functools.partial(_by_name, timed, stamps["build"], bound)
    return stamps


def _by_kind(timed: Any, record: dict[str, Any], call: Any) -> Any:
    return lambda kind: timed(record, kind.name, call, kind)


def _by_name(timed: Any, record: dict[str, Any], call: Any, kind: str, *args: Any) -> Any:
    return timed(record, kind, call, kind, *args)


def _start_span(runtime: Any, pods: int, timeout: float) -> dict[str, Any]:
    """Start the scheduler with the pods already pending and measure until it bound them all:
    when each collection was listed and built into the cache, when every informer synced, the
    first and the last bind, all from the start."""
    stamps = _timed_start(runtime)
    start, cpu_start, threads_start = time.monotonic(), time.process_time(), thread_cpu()
    stamps["t0"] = start
    runtime.start()

    def since_start(predicate: Any, interval: float) -> float | None:
        done = _wait(predicate, timeout, interval)
        return None if done is None else time.monotonic() - start

    synced = since_start(runtime.ready, 0.001)
    rss_synced = _rss_mb()
    first = since_start(lambda: _counter(runtime.metrics.binds, "bound") >= 1, 0.001)
    cpu_first = time.process_time() - cpu_start
    elapsed = since_start(lambda: _counter(runtime.metrics.binds, "bound") >= pods, 0.005)
    cpu, threads_end = time.process_time() - cpu_start, thread_cpu()
    return {
        "elapsed": elapsed,
        "first": first,
        "cpuFirst": cpu_first,
        "synced": synced,
        "rssSynced": rss_synced,
        "lists": stamps["list"],
        "builds": stamps["build"],
        "cpu": cpu,
        "parts": breakdown(threads_start, threads_end, cpu),
    }


def start_child(serve: Any, nodes: int) -> tuple[Connection, Any, int]:
    """`serve(nodes, conn)` in a spawned child: the pipe to it, the process and the fake API
    server's port (its first message)."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(nodes, child), daemon=True)
    proc.start()
    return parent, proc, parent.recv()


def run(
    nodes: int, pods: int, timeout: float, from_start: bool = False, dra: bool = False
) -> dict[str, Any]:
    parent, proc, port = start_child(serve_fake_dra if dra else serve_fake, nodes)
    runtime = _runtime(port)
    if from_start:
        parent.send(("pods", pods))
        parent.recv()
    try:
        if from_start:
            span = _start_span(runtime, pods, timeout)
        else:
            runtime.start()
            if _wait(runtime.ready, 60) is None:
                raise SystemExit("the scheduler's cache did not sync within 60 s")
            span = _bind_span(runtime, parent, pods, timeout)
        counts = _metrics(runtime)
    finally:
        runtime.stop()
        runtime.kube.close()
    parent.send(("check", pods))
    check = parent.recv()
    parent.send(("stop", None))
    parent.recv()
    proc.join(10)
    return _result(nodes, pods, span, counts, check)


def _result(
    nodes: int, pods: int, span: dict[str, Any], counts: dict[str, Any], check: dict[str, Any]
) -> dict[str, Any]:
    elapsed, first, cpu = span["elapsed"], span["first"], span["cpu"]
    per_pod = {part: round(1e6 * seconds / pods, 1) for part, seconds in span["parts"].items()}
    out = {
        "nodes": nodes,
        "pods": pods,
        "fromStart": "synced" in span,
        "seconds": None if elapsed is None else round(elapsed, 3),
        "boundPodsPerSecond": None if elapsed is None else round(pods / elapsed, 1),
        "firstBindSeconds": None if first is None else round(first, 3),
        "schedulerCpuSeconds": round(cpu, 3),
        "cpuPerBoundPodUs": round(1e6 * cpu / pods, 1),
        "cpuPerBoundPodUsByPart": per_pod,
        "attempts": counts["attempts"],
        "meanCycleMs": round(counts["meanCycleMs"], 3),
        "check": check,
    }
    if "synced" in span:
        out.update(_start_figures(pods, span))
    return out


def _start_figures(pods: int, span: dict[str, Any]) -> dict[str, Any]:
    """Where the start went: every informer synced, the first cycle (synced to first bind),
    each collection's list and cache build ([seconds, ended at]), the rate after the first."""
    synced, first, elapsed = span["synced"], span["first"], span["elapsed"]
    after = None
    if first is not None and elapsed is not None and elapsed > first:
        after = round((pods - 1) / (elapsed - first), 1)
    return {
        "syncedSeconds": None if synced is None else round(synced, 3),
        "cpuToFirstBindSeconds": round(span["cpuFirst"], 3),
        "firstCycleSeconds": None if first is None or synced is None else round(first - synced, 3),
        "listSeconds": span["lists"],
        "cacheBuildSeconds": span["builds"],
        "boundPodsPerSecondAfterFirst": after,
        "rssMBWhenSynced": round(span["rssSynced"], 1),
        "peakRssMB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _rss_mb() -> float:
    """This process's resident memory now (the scheduler and this harness; the fake API server
    runs in its own process), in MiB."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def _print(result: dict[str, Any]) -> None:
    print(
        f"{result['pods']} pods on {result['nodes']} nodes: "
        f"{result['boundPodsPerSecond']} bound pods/s "
        f"(all bound in {result['seconds']} s, first after {result['firstBindSeconds']} s; "
        f"scheduler CPU {result['schedulerCpuSeconds']} s)"
    )
    parts = ", ".join(f"{k} {v}" for k, v in result["cpuPerBoundPodUsByPart"].items())
    print(f"CPU per bound pod: {result['cpuPerBoundPodUs']} us ({parts})")
    if result["fromStart"]:
        print(
            f"from start: CPU to the first bind {result['cpuToFirstBindSeconds']} s, "
            f"all informers synced after {result['syncedSeconds']} s, first cycle "
            f"{result['firstCycleSeconds']} s, {result['boundPodsPerSecondAfterFirst']} bound "
            "pods/s between the first and the last bind"
        )
        print(
            f"memory: RSS {result['rssMBWhenSynced']} MiB when every informer synced, "
            f"peak {result['peakRssMB']} MiB (the scheduler's process)"
        )
        print(f"list [s, ended at s]: {result['listSeconds']}")
        print(f"cache build [s, ended at s]: {result['cacheBuildSeconds']}")
    print(f"attempts: {result['attempts']}, mean cycle {result['meanCycleMs']} ms")
    print(f"check: {result['check']}")


def _one(root: Path, args: argparse.Namespace, dra: bool = False) -> dict[str, Any]:
    """One run of `root`'s scheduler in a fresh process (this file, `--root root --json`)."""
    command = [sys.executable, __file__, "--root", str(root), "--json"]
    command += ["--nodes", str(args.nodes), "--pods", str(args.pods)]
    command += ["--timeout", str(args.timeout), *(["--start"] if args.start else [])]
    command += ["--dra"] if dra else []
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 and not done.stdout.strip():
        raise SystemExit(f"run of {root} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(base: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """Base and this checkout alternately, `args.runs` each; every run and the medians. With
    `base` None (`--vs-dra`): this checkout's GPUs from the device plugin ("base") and from DRA
    through the claims it makes ("new")."""
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "new": []}
    ways = [("base", base or ROOT, False), ("new", ROOT, base is None)]
    for i in range(args.runs):
        for label, root, dra in ways:
            load = os.getloadavg()[0]  # a shared machine's wall figures go with its load
            result = _one(root, args, dra) | {"loadAverage": round(load, 2)}
            runs[label].append(result)
            parts = result["cpuPerBoundPodUsByPart"]
            start = ""
            if result["fromStart"]:
                start = (
                    f", first bind {result['firstBindSeconds']} s (CPU to it "
                    f"{result.get('cpuToFirstBindSeconds')} s, synced "
                    f"{result['syncedSeconds']} s, lists {result['listSeconds']}, builds "
                    f"{result['cacheBuildSeconds']}), {result['boundPodsPerSecondAfterFirst']} "
                    "pods/s after the first"
                )
            print(
                f"run {i + 1} {label} (load average {load:.2f}): "
                f"{result['cpuPerBoundPodUs']} us CPU/pod {parts}, "
                f"{result['boundPodsPerSecond']} pods/s, bound {result['check']['bound']}{start}",
                flush=True,
            )
    summary = {label: _medians(results) for label, results in runs.items()}
    for label, med in summary.items():
        print(f"median {label}: {med}")
    ratio = summary["new"]["cpuPerBoundPodUs"] / summary["base"]["cpuPerBoundPodUs"]
    print(f"CPU per bound pod new/base: {ratio:.3f}")
    if args.start:
        for what, field in (
            ("time to first bind", "firstBindSeconds"),
            ("CPU to first bind", "cpuToFirstBindSeconds"),
            ("pods/s from start", "boundPodsPerSecond"),
        ):
            ratios = [
                f"{n[field] / b[field]:.2f}" for b, n in zip(runs["base"], runs["new"], strict=True)
            ]
            print(f"{what} new/base, run by run: {', '.join(ratios)}")
    return {"runs": runs, "medians": summary, "cpuRatio": ratio}


def _medians(results: list[dict[str, Any]]) -> dict[str, Any]:
    def med(values: list[float]) -> float:
        return round(statistics.median(values), 1)

    return {
        "firstBindSeconds": round(statistics.median(r["firstBindSeconds"] for r in results), 3),
        "cpuPerBoundPodUs": med([r["cpuPerBoundPodUs"] for r in results]),
        "boundPodsPerSecond": med([r["boundPodsPerSecond"] or 0.0 for r in results]),
        "boundPodsPerSecondRange": [
            min(r["boundPodsPerSecond"] or 0.0 for r in results),
            max(r["boundPodsPerSecond"] or 0.0 for r in results),
        ],
        "byPart": {
            part: med([r["cpuPerBoundPodUsByPart"][part] for r in results])
            for part in (*PARTS, "other")
        },
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose scheduler runs")
    parser.add_argument("--compare", type=Path, metavar="BASE_DIR", help="base checkout")
    parser.add_argument("--runs", type=int, default=3, help="runs of each with --compare")
    parser.add_argument(
        "--start",
        action="store_true",
        help="store the pods before the scheduler starts; measure from its start",
    )
    parser.add_argument(
        "--dra",
        action="store_true",
        help="the nodes' GPUs on DRA alone, asked as nvidia.com/gpu through a mapping class",
    )
    parser.add_argument(
        "--vs-dra",
        action="store_true",
        help="compare this checkout's device-plugin GPUs (base) with DRA's (new)",
    )
    args = parser.parse_args(argv)
    if args.compare is not None or args.vs_dra:
        summary = compare(None if args.vs_dra else args.compare.resolve(), args)
        if args.json:
            print(json.dumps(summary))
        return 0
    sys.path.insert(0, str(args.root.resolve()))
    result = run(args.nodes, args.pods, args.timeout, args.start, args.dra)
    if args.json:
        print(json.dumps(result))
    else:
        _print(result)
    ok = result["check"]["bound"] == result["pods"] and not result["check"]["overcommittedNodes"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
