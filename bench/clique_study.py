"""Gangs and NVLink cliques (issue 30, DESIGN §13): gputopo, fgd and bestfit, seeds 1-5.

The cluster (`bench/data/cluster-nvl72.yaml`): 8 racks × 18 nodes × 4 GPUs, each rack one clique
(`nvidia.com/gpu.clique`). The workload (`bench/data/workload-cliques.yaml`): 64-GPU gangs
(16 × 4 GPUs), 16-GPU gangs (4 × 4 GPUs) and 1-GPU pods arriving interleaved for five hours,
asking for about the whole cluster, each leaving after its duration. Event mode with the node
order drawn from the seed (`shuffle_nodes`). Per policy, mean [min-max] over the seeds of: gangs
started inside one clique and across several, the time-weighted mean number of racks partly in use
(`domains.<label>.partlyUsedMean`), the p99 wait of 64- and 16-GPU gangs and utilisation; and,
checked on every gang that spans cliques under a policy that prefers one clique, how many one
clique could have held (`place_gang` with the clique required, on the same snapshot): 0 expected.

    .venv/bin/python bench/clique_study.py [--seeds 1-5] [--policies gputopo,fgd,bestfit]
        [--jobs 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.living_cluster import Column, seeds_of, table
from scheduler.placement import CLIQUE_LABEL, GangPlacement, TopologyConstraint, place_gang
from scheduler.sim import events
from scheduler.sim.protocol import RunResult
from scheduler.sim.report import runs_document
from scheduler.sim.workload import load_cluster, load_workload

DATA = Path(__file__).resolve().parent / "data"
CLUSTER = DATA / "cluster-nvl72.yaml"
WORKLOAD = DATA / "workload-cliques.yaml"


def one_run(policy: str, seed: int) -> tuple[RunResult, int]:
    """The run, and how many gangs spanned cliques although one clique could hold them."""
    spec, workload = load_cluster(str(CLUSTER)), load_workload(str(WORKLOAD))
    missed = [0]

    def place_and_check(*args: Any, **kwargs: Any) -> GangPlacement:
        result = place_gang(*args, **kwargs)
        if result.ok and result.domain is None and kwargs.get("prefer_clique"):
            one = TopologyConstraint(label=CLIQUE_LABEL)
            missed[0] += place_gang(*args, **{**kwargs, "topology": one}).ok
        return result

    events.place_gang = place_and_check  # type: ignore[attr-defined]
    run = events.run_events(spec, workload, policy, seed, shuffle_nodes=True)
    return run, missed[0]


def _domain(figure: str) -> Callable[[RunResult], float | None]:
    return lambda run: run.domains.get(CLIQUE_LABEL, {}).get(figure)


def _gang_p99(gpus: int) -> Callable[[RunResult], float | None]:
    return lambda run: run.gang_wait_p99.get(gpus)


COLUMNS: tuple[Column, ...] = (
    ("gangs in one clique", _domain("gangsWithin")),
    ("gangs spanning", _domain("gangsSpanning")),
    ("racks partly used (mean)", _domain("partlyUsedMean")),
    ("p99 wait 64-GPU gang s", _gang_p99(64)),
    ("p99 wait 16-GPU gang s", _gang_p99(16)),
    ("util %", lambda r: r.utilisation),
)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", default="1-5")
    p.add_argument("--policies", default="gputopo,fgd,bestfit")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", action="store_true", help="print one JSON document instead")
    args = p.parse_args(argv)
    work = [(policy, seed) for policy in args.policies.split(",") for seed in seeds_of(args.seeds)]
    began = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = list(pool.map(one_run, *zip(*work, strict=True)))
    elapsed = time.perf_counter() - began
    runs, missed = [run for run, _ in done], [m for _, m in done]
    if args.json:
        doc = runs_document(runs)
        doc["spanningButOneCliqueHeld"] = missed
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        by_run = {id(run): float(m) for run, m in done}
        checked = ("spanning, one clique held it", lambda r: by_run[id(r)])
        text = table(runs, (*COLUMNS, checked))
        sys.stdout.write(text + f"\n{elapsed:.0f} s on {args.jobs} processes\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
