"""Retry waves end to end (not a test): the real scheduler `Runtime` over a backlog, against the
fake API server.

The fake API server (real HTTP, a child process) has `--nodes` ready 8-GPU nodes. The scheduler
(real informers, cache, queue, loop, binder, reporter, the real `kubernetes` client) first binds
one 1-GPU pod per GPU, so every GPU is taken; then `--backlog` more 1-GPU pods are stored, and
each is tried once and refused (unschedulable). Then `--waves` times: one bound pod is deleted,
the scheduler tries every waiting pod again (room may have been freed), binds one and refuses the
rest; the wave ends when the freed GPU is bound again and every other waiting pod was tried.

Printed per wave (median and worst): its wall time, the scheduler process's CPU time and the
scheduling loop thread's alone, and the attempts it made; the CPU is read from each thread's own
clock at both ends of a wave (nothing is timed inside the scheduler). `--root DIR` runs the
scheduler (and the fake API server) of another checkout, so two commits can be compared.

    .venv/bin/python bench/retry_wave_bench.py [--nodes 1000] [--backlog 2000] [--waves 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_bind_bench import (
    _counter,
    _runtime,
    _wait,
    breakdown,
    fake_with_nodes,
    pod_object,
    start_child,
    thread_cpu,
)

ROOT = Path(__file__).resolve().parents[1]


def serve_fake(nodes: int, conn: Connection) -> None:
    """The child: a fake API server with `nodes` ready 8-GPU nodes, driven through `conn`."""
    fake = fake_with_nodes(nodes, 400_000)
    conn.send(fake.port)
    while True:
        command, arg = conn.recv()
        if command == "pods":  # (prefix, count)
            prefix, count = arg
            for i in range(count):
                fake.put_object("pods", pod_object(f"{prefix}-{i:06d}", 1))
            conn.send("created")
        elif command == "delete":
            conn.send(fake.delete_object("pods", arg, "default"))
        else:
            fake.stop()
            conn.send("stopped")
            return


def _attempts(runtime: Any, result: str) -> float:
    return _counter(runtime.metrics.attempts, result)


def run(nodes: int, backlog: int, waves: int, timeout: float) -> dict[str, Any]:
    parent, proc, port = start_child(serve_fake, nodes)
    runtime = _runtime(port)
    full = nodes * 8
    rows: list[dict[str, float]] = []
    try:
        runtime.start()
        if _wait(runtime.ready, 60) is None:
            raise SystemExit("the scheduler's cache did not sync within 60 s")

        def bound() -> float:
            return _counter(runtime.metrics.binds, "bound")

        parent.send(("pods", ("full", full)))
        parent.recv()
        if _wait(lambda: bound() >= full, timeout) is None:
            raise SystemExit(f"{full} pods not bound within {timeout} s")
        parent.send(("pods", ("wait", backlog)))
        parent.recv()
        if _wait(lambda: _attempts(runtime, "unschedulable") >= backlog, timeout) is None:
            raise SystemExit(f"the {backlog} waiting pods not all tried within {timeout} s")
        time.sleep(0.5)  # the reporter's writes for the first refusals
        for wave in range(waves):
            refused_before = _attempts(runtime, "unschedulable")
            start, cpu_start, threads_start = time.monotonic(), time.process_time(), thread_cpu()
            parent.send(("delete", f"full-{wave:06d}"))
            parent.recv()
            waiting = backlog - wave - 1

            def done(
                refused_before: float = refused_before, wave: int = wave, waiting: int = waiting
            ) -> bool:
                return bound() >= full + wave + 1 and (
                    _attempts(runtime, "unschedulable") - refused_before >= waiting
                )

            if _wait(done, timeout, 0.001) is None:
                raise SystemExit(f"wave {wave + 1} did not end within {timeout} s")
            wall, cpu = time.monotonic() - start, time.process_time() - cpu_start
            parts = breakdown(threads_start, thread_cpu(), cpu)
            rows.append(
                {
                    "wall": wall,
                    "cpu": cpu,
                    "loop": parts["decide"],
                    "refused": _attempts(runtime, "unschedulable") - refused_before,
                }
            )
    finally:
        runtime.stop()
        runtime.kube.close()
        parent.send(("stop", None))
        parent.recv()
        proc.join(10)
    return {"nodes": nodes, "backlog": backlog, "waves": rows}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose scheduler runs")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root.resolve()))
    result = run(args.nodes, args.backlog, args.waves, args.timeout)
    rows = result["waves"]
    print(
        f"{args.root}: {args.nodes} nodes × 8 GPUs all taken, {args.backlog} pods waiting, "
        f"{args.waves} waves (one pod deleted before each)"
    )
    for name, unit, scale in (
        ("wall", "ms", 1e3),
        ("cpu", "ms", 1e3),
        ("loop", "ms", 1e3),
        ("refused", "", 1.0),
    ):
        values = [scale * row[name] for row in rows]
        label = {"cpu": "process CPU", "loop": "loop thread CPU", "refused": "refusals"}
        print(
            f"  per wave, {label.get(name, name)}: median {statistics.median(values):,.1f} "
            f"{unit}, worst {max(values):,.1f} {unit}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
