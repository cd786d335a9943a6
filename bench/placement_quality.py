"""Placement quality on the Alibaba GPU trace (Weng et al., ATC '23), next to the paper's numbers.

For every pod list in `alibaba-cluster-trace-gpu-v2023/` (on `openb_node_list_gpu_node.csv`) and
every seed (42..51 by default), the FGD protocol (`scheduler.sim.protocol`: shuffle, inflate to
130% of GPU capacity, each pod tried once) is run with each policy on the real placement code.
Reported per trace and policy: GPU allocation ratio at 100% and 130% arrived demand, mean ± sd
over the seeds, beside the published means of `fgd-atc23-expected-results/
analysis_allo_discrete.csv` where the paper ran that trace; plus fragmentation and decisions/s.

The traces are found in `--traces`, else `$GPUTOPO_TRACES`, else `../shared/traces` next to the
repository root. Runs go to `--jobs` worker processes (default 2). `--out FILE.json` keeps every
run (the simulator's `--json` document plus the trace name).

    .venv/bin/python bench/placement_quality.py [--policies gputopo,bestfit,fgd,random]
        [--seeds 42-51] [--variants default,gpushare40] [--jobs 2] [--out results.json]
        [--config scheduler.yaml]  # the gputopo policy with another scheduler config
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.config import config_file_argument, load_config
from scheduler.sim.protocol import RunResult, run_protocol
from scheduler.sim.report import runs_document
from scheduler.sim.workload import load_cluster, load_workload

TRACE_DIR = "alibaba-cluster-trace-gpu-v2023"
RESULTS = "fgd-atc23-expected-results/analysis_allo_discrete.csv"
NODE_LIST = "openb_node_list_gpu_node.csv"
PREFIX = "openb_pod_list_"
PAPER_NAMES = {"01-Random": "random", "05-BestFit": "bestfit", "06-FGD": "fgd"}
PAPER_ONLY = ("02-DotProd", "03-GpuClustering", "04-GpuPacking")
Published = dict[tuple[str, str], dict[str, list[float]]]


def traces_root(flag: str | None) -> Path:
    if flag:
        return Path(flag)
    if os.environ.get("GPUTOPO_TRACES"):
        return Path(os.environ["GPUTOPO_TRACES"])
    return Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def variants(root: Path, wanted: Sequence[str]) -> list[str]:
    found = sorted(p.name[len(PREFIX) : -4] for p in (root / TRACE_DIR).glob(f"{PREFIX}*.csv"))
    if wanted:
        missing = [v for v in wanted if v not in found]
        if missing:
            raise SystemExit(f"placement_quality: no pod list for {', '.join(missing)} in {root}")
        return list(wanted)
    return sorted(found, key=lambda v: (v != "gputopo", v))


def published(root: Path) -> Published:
    """(trace, paper policy) -> {"100": [per seed], "130": [...]}."""
    path = root / RESULTS
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            key = (row["workload"].removeprefix(PREFIX), row["sc_policy"])
            entry = out.setdefault(key, {"100": [], "130": []})
            for point in entry:
                entry[point].append(float(row[point]))
    return out


def seeds_of(text: str) -> list[int]:
    """The seeds of `1-5`, `1,3,7` or `1-60,101-190`; ValueError naming a part that is not
    N or N-M with N <= M."""
    out: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi if dash else lo)
        except ValueError:
            first, last = 1, 0
        if first > last:
            raise ValueError(f"seeds {text!r}: {part.strip()!r} is not N or N-M with N <= M")
        out.extend(range(first, last + 1))
    return out


def one_run(
    root: str, variant: str, policy: str, seed: int, config: str | None = None
) -> tuple[str, RunResult, float]:
    base = Path(root) / TRACE_DIR
    spec = load_cluster(str(base / NODE_LIST))
    workload = load_workload(str(base / f"{PREFIX}{variant}.csv"))
    scheduler_config = load_config(config) if config else None
    start = time.perf_counter()
    result = run_protocol(spec, workload, policy, seed, config=scheduler_config)
    return variant, result, time.perf_counter() - start


def _fmt(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:6.2f}"
    return f"{statistics.fmean(values):6.2f} ± {statistics.stdev(values):.2f}"


def table(variant: str, runs: Sequence[RunResult], paper: Published) -> str:
    lines = [f"== {variant}", f"{'policy':<22}{'alloc@100':>16}{'alloc@130':>16}  frag%   dec/s"]
    by_policy: dict[str, list[RunResult]] = {}
    for run in runs:
        by_policy.setdefault(run.policy, []).append(run)
    for policy, group in by_policy.items():
        at100 = [r.allocation.get(100, 0.0) for r in group]
        at130 = [r.allocation.get(130, 0.0) for r in group]
        frag = statistics.fmean(r.fragmented_share for r in group)
        rate = statistics.fmean(r.decisions_per_second for r in group)
        lines.append(f"{policy:<22}{_fmt(at100):>16}{_fmt(at130):>16}  {frag:5.2f}  {rate:6.0f}")
    for paper_name in (*PAPER_NAMES, *PAPER_ONLY):
        found = paper.get((variant, paper_name))
        if found:
            label = f"paper {paper_name}"
            lines.append(f"{label:<22}{_fmt(found['100']):>16}{_fmt(found['130']):>16}")
    return "\n".join(lines)


def _mean_at(runs: Sequence[RunResult], policy: str) -> float | None:
    values = [r.allocation.get(130, 0.0) for r in runs if r.policy == policy]
    return statistics.fmean(values) if values else None


def summary(results: dict[str, list[RunResult]], paper: Published) -> str:
    """One line per trace: allocation at 130% per policy, the paper's FGD, gputopo − both FGDs."""
    policies = list(dict.fromkeys(r.policy for runs in results.values() for r in runs))
    head = f"{'trace':<14}" + "".join(f"{p:>10}" for p in policies)
    lines = [head + f"{'paper FGD':>11}{'def-fgd':>9}{'def-paper':>10}"]
    for variant, runs in results.items():
        cells = [_mean_at(runs, p) for p in policies]
        row = f"{variant:<14}" + "".join(
            f"{c:>10.2f}" if c is not None else f"{'-':>10}" for c in cells
        )
        fgd_paper = paper.get((variant, "06-FGD"), {}).get("130")
        ours, fgd = _mean_at(runs, "gputopo"), _mean_at(runs, "fgd")
        row += f"{statistics.fmean(fgd_paper):>11.2f}" if fgd_paper else f"{'-':>11}"
        row += f"{ours - fgd:>+9.2f}" if ours is not None and fgd is not None else f"{'-':>9}"
        diff = ours - statistics.fmean(fgd_paper) if ours is not None and fgd_paper else None
        row += f"{diff:>+10.2f}" if diff is not None else f"{'-':>10}"
        lines.append(row)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--traces")
    p.add_argument("--policies", default="gputopo,bestfit,fgd,random")
    p.add_argument("--seeds", default="42-51")
    p.add_argument("--variants", default="")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out")
    p.add_argument(
        "--config",
        type=config_file_argument,
        help="scheduler config the gputopo policy uses (default: the shipped one)",
    )
    args = p.parse_args(argv)
    root = traces_root(args.traces)
    if not (root / TRACE_DIR).is_dir():
        raise SystemExit(f"placement_quality: no {TRACE_DIR}/ under {root} (use --traces)")
    names = variants(root, [v for v in args.variants.split(",") if v])
    policies = [x for x in args.policies.split(",") if x]
    seeds = seeds_of(args.seeds)
    tasks = [(str(root), v, pol, s, args.config) for v in names for pol in policies for s in seeds]
    results: dict[str, list[RunResult]] = {v: [] for v in names}
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        columns = [[t[i] for t in tasks] for i in range(5)]
        for done, (variant, result, _secs) in enumerate(pool.map(one_run, *columns), 1):
            results[variant].append(result)
            sys.stderr.write(f"\r{done}/{len(tasks)} runs, {time.perf_counter() - start:.0f}s")
    sys.stderr.write("\n")
    paper = published(root)
    for variant in names:
        print(table(variant, results[variant], paper))
    print("\n== GPU allocation at 130% arrived demand (mean over seeds)")
    print(summary(results, paper))
    if args.out:
        doc = {v: runs_document(rs)["runs"] for v, rs in results.items()}
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"\n{len(tasks)} runs in {time.perf_counter() - start:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
