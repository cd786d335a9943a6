"""Placement quality in a living cluster (issue 13): every policy, seeds 1-5, two workloads
(and the issue 27 check mixes on request).

* `builtin`: the simulator's built-in cluster and workload (`gputopo-scheduler simulate` with no
  `--cluster`/`--workload`: gangs, shares, arrivals and departures);
* `trace`: the living-cluster replay (`scheduler.sim.replay`) of `openb_pod_list_default.csv` on
  `openb_node_list_gpu_node.csv` at the study settings: from `STUDY_START` (recorded second
  10,000,000, 99 % of the pods arrive after it), `STUDY_LOAD` (2000 × the recorded arrival rate)
  on `STUDY_NODES` (half of each kind of node, 3,087 GPUs). The whole trace never asks for more
  than 88 % of its own 6,212 GPUs at once, so the study replays it on half of them: GPUs in use
  then peak at about 95 % of the cluster and 8-GPU pods wait;
* `mix-burst`, `mix-wide`, `mix-single`, `mix-stream` (`mixes`: all four): the built-in cluster
  with the job mixes of `bench/data/workload-mix-*.yaml`, which the policy was not tuned on.

All run in event mode with `shuffle_nodes` (the node order is drawn from the seed, as the
protocol does), so deterministic policies vary across seeds too; `--given-order` turns it off
(the built-in workload then matches `simulate` exactly). Every policy runs the shipped
`preemption:` block (the starvation guard, priority preemption, reclaim) unless
`--no-preemption`. Per study and policy, mean and [min-max] over the seeds: the makespan, the
mean wait over all pods, the GPU-weighted mean wait, mean completion time and slowdown,
utilisation (arrival window), fragmentation over time, holds and evictions; then per pod class
the p50 and p99 waits and the longest 8-GPU wait (every figure is defined in
`scheduler/sim/README.md`). Runs go to `--jobs` processes.

    .venv/bin/python bench/living_cluster.py [--jobs 2] [--seeds 1-5] [--policies ...]
        [--studies builtin,trace] [--json] [--plot PREFIX]  # PREFIX-builtin.png, PREFIX-trace.png
        [--studies builtin,mixes]  # and the four check mixes (mix-burst, ...)
        [--config scheduler.yaml]  # the gputopo policy with another scheduler config
        [--no-preemption]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.placement_quality import seeds_of
from scheduler.config import config_file_argument, load_config
from scheduler.sim.events import run_events
from scheduler.sim.plot import plot_runs
from scheduler.sim.policies import POLICIES
from scheduler.sim.protocol import RunResult
from scheduler.sim.replay import (
    STUDY_LOAD,
    STUDY_NODES,
    STUDY_START,
    Replay,
    node_share,
    read_replay,
)
from scheduler.sim.report import replay_document, runs_document
from scheduler.sim.workload import ClusterSpec, Workload, load_cluster, load_workload

TRACE_DIR = "alibaba-cluster-trace-gpu-v2023"
STUDIES = ("builtin", "trace")
CLASSES = ("share", "1-gpu", "2-gpu", "4-gpu", "8-gpu", "gang", "all")


def traces_root() -> Path:
    if os.environ.get("GPUTOPO_TRACES"):
        return Path(os.environ["GPUTOPO_TRACES"])
    return Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def trace_replay() -> Replay:
    pods = traces_root() / TRACE_DIR / "openb_pod_list_default.csv"
    return read_replay(pods, load=STUDY_LOAD, start=STUDY_START)


MIXES_DIR = Path(__file__).resolve().parent / "data"
MIXES = ("burst", "wide", "single", "stream")
"""The issue 27 check mixes on the built-in cluster: study `mix-<name>` replays
`bench/data/workload-mix-<name>.yaml` (workloads the policy was not tuned on)."""


def study_names(text: str) -> list[str]:
    """`--studies`: builtin, trace, mix-<name>, or `mixes` (the four); ValueError names an
    unknown one."""
    known = (*STUDIES, *(f"mix-{m}" for m in MIXES))
    names: list[str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "mixes":
            names.extend(f"mix-{m}" for m in MIXES)
        elif part in known:
            names.append(part)
        else:
            raise ValueError(
                f"--studies: unknown study {part!r} (known: {', '.join(known)}, mixes)"
            )
    return names


def inputs(study: str) -> tuple[ClusterSpec, Workload]:
    """The cluster and workload of `study` (one of `study_names`)."""
    if study == "builtin":
        return load_cluster("default"), load_workload("default")
    if study.startswith("mix-"):
        mix = MIXES_DIR / f"workload-mix-{study.removeprefix('mix-')}.yaml"
        return load_cluster("default"), load_workload(str(mix))
    nodes = load_cluster(str(traces_root() / TRACE_DIR / "openb_node_list_gpu_node.csv"))
    return node_share(nodes, STUDY_NODES), trace_replay().workload


def one_run(
    study: str,
    policy: str,
    seed: int,
    shuffle: bool,
    config: str | None = None,
    preemption: bool = True,
) -> tuple[str, RunResult]:
    spec, workload = inputs(study)
    scheduler_config = load_config(config) if config else None
    run = run_events(
        spec,
        workload,
        policy,
        seed,
        shuffle_nodes=shuffle,
        config=scheduler_config,
        preemption=preemption,
    )
    return study, run


def _spread(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    mean = statistics.fmean(known)
    digits = 2 if max(abs(v) for v in known) < 10 else 1  # slowdowns: 1.12, not 1.1
    if len(known) == 1 or min(known) == max(known):
        return f"{mean:,.{digits}f}"
    return f"{mean:,.{digits}f} [{min(known):,.{digits}f}-{max(known):,.{digits}f}]"


Figure = Callable[[RunResult], float | None]


def _wait(name: str, quantile: str) -> Figure:
    def get(run: RunResult) -> float | None:
        waits = run.waits.get(name)
        return None if waits is None else getattr(waits, quantile)

    return get


def _figure(name: str) -> Figure:
    def get(run: RunResult) -> float | None:
        return None if run.figures is None else getattr(run.figures, name)

    return get


def _preempted(name: str) -> Figure:
    def get(run: RunResult) -> float | None:
        return None if run.preemption is None else getattr(run.preemption, name)

    return get


COLUMNS: tuple[tuple[str, Figure], ...] = (
    ("makespan s", _figure("makespan")),
    ("mean wait s", _wait("all", "mean")),
    ("GPU-weighted wait s", _figure("gpu_weighted_wait")),
    ("mean JCT s", _figure("mean_completion")),
    ("mean slowdown", _figure("mean_slowdown")),
    ("util %", lambda r: r.utilisation),
    ("frag over time %", lambda r: r.fragmentation_mean),
    ("holds", _preempted("holds")),
    ("evicted", _preempted("pods_evicted")),
)
WAIT_COLUMNS: tuple[tuple[str, Figure], ...] = (
    *((f"p50 {c}", _wait(c, "p50")) for c in CLASSES),
    *((f"p99 {c}", _wait(c, "p99")) for c in CLASSES),
    ("longest 8-GPU", lambda r: r.longest_8gpu_wait),
)


Column = tuple[str, Figure]


def table(runs: Sequence[RunResult], columns: Sequence[Column] = COLUMNS) -> str:
    """Per policy: mean [min-max] over the seeds of each column."""
    rows = [["policy", "seeds", *(name for name, _ in columns)]]
    for policy in dict.fromkeys(r.policy for r in runs):
        group = [r for r in runs if r.policy == policy]
        rows.append(
            [policy, str(len(group)), *(_spread([f(r) for r in group]) for _, f in columns)]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def add_config_flag(p: argparse.ArgumentParser) -> None:
    """`--config`: the scheduler config the gputopo policy uses."""
    p.add_argument(
        "--config",
        type=config_file_argument,
        help="scheduler config the gputopo policy uses (default: the shipped one)",
    )


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", default="1-5")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument(
        "--studies",
        default=",".join(STUDIES),
        help="comma-separated: builtin, trace, mix-<burst|wide|single|stream>, mixes (all four)",
    )
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--given-order", action="store_true", help="do not shuffle the node order")
    p.add_argument(
        "--no-preemption", action="store_true", help="run without the `preemption:` block"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document instead")
    p.add_argument("--plot", help="write PREFIX-<study>.png (allocation, fragmentation vs time)")
    add_config_flag(p)
    args = p.parse_args(argv)
    try:
        args.studies = study_names(args.studies)
    except ValueError as e:
        p.error(str(e))
    return args


def run_all(args: argparse.Namespace) -> dict[str, list[RunResult]]:
    studies: list[str] = args.studies
    policies = [p for p in args.policies.split(",") if p]
    work = [(s, p, seed) for s in studies for p in policies for seed in seeds_of(args.seeds)]
    results: dict[str, list[RunResult]] = {s: [] for s in studies}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(
                one_run, s, p, seed, not args.given_order, args.config, not args.no_preemption
            )
            for s, p, seed in work
        ]
        for future in futures:
            study, run = future.result()
            results[study].append(run)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    began = time.perf_counter()
    results = run_all(args)
    elapsed = time.perf_counter() - began
    if args.plot:
        for study, runs in results.items():
            plot_runs(runs, Path(f"{args.plot}-{study}.png"), title=f"living cluster: {study}")
    if args.json:
        doc: dict[str, Any] = {"seconds": round(elapsed, 1), "shuffleNodes": not args.given_order}
        for study, runs in results.items():
            doc[study] = runs_document(runs, trace_replay() if study == "trace" else None)
        doc.get("trace", {}).get("replay", {})["nodeShare"] = STUDY_NODES
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    for study, runs in results.items():
        extra = ""
        if study == "trace":
            replay = replay_document(trace_replay())
            extra = f" ({replay['podsReplayed']} pods, load {STUDY_LOAD:g}, {STUDY_NODES:g} nodes)"
        sys.stdout.write(f"\n## {study}{extra}\n" + table(runs))
        sys.stdout.write("\nwaits (s) per pod class\n" + table(runs, WAIT_COLUMNS))
    sys.stdout.write(f"\n{elapsed:.0f} s on {args.jobs} processes\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
