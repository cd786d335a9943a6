"""Issue 45's study: placement judged on generated workloads it was not tuned on.

Two seed ranges of generated workloads (`scheduler.sim.generate`): `--tuning` (the workloads a
change to the policy may be tuned on) and `--judging` (those it is judged on); they must not
share a seed, and either may be `none` (a subset). Every policy runs on each workload in event
mode once per simulator seed (`--sim-seeds`, default 1-3: the node order and `random`'s draws,
apart from the workload's seed); per range the study prints the per-workload table (mean wait
over all pods, makespan, each class's median wait, averaged over the simulator seeds) and the
summary of `scheduler.sim.generalise` (the issue's "Verified when"), then `gputopo` paired
with each peer workload by workload (`paired_text`: the mean difference in mean wait and in
makespan with a 95 % confidence interval bootstrapped over the workloads, and a sign test; it
needs scipy, `pip install -e ".[study]"`, and says so in its place without). Beside them, as
`bench/living_cluster.py` runs them: the built-in workload and the four check mixes
(`--beside`, `--beside-seeds`, default 1-3). It ends with its runtime and the compute time of
its runs.

Each run's figures are cached on disk (`--cache`, default `.cache/generalise/` in the
repository; `--no-cache` off), one JSON file per (workload seed, size, policy, simulator seed,
`--config`). A `gputopo` entry is also keyed by a digest of the scheduler's and agent's code and
data, so a change to the policy recomputes it alone. The peers' entries are not (that is the
point of the cache); one computed at other code is counted on a line of its own, and
`--recompute fgd,bestfit` (or `all`) computes those policies afresh.

    .venv/bin/python bench/generalise_study.py --tuning 1-10 --judging 101-130 --jobs 2
    .venv/bin/python bench/generalise_study.py --tuning 1-10 --judging none --beside none
    .venv/bin/python bench/generalise_study.py --tuning 1-2 --judging 3-4 \\
        --generated-jobs 60 --generated-nodes 5 --sim-seeds 1 --beside none  # a small run

What the policies know in advance: by default `fgd` is handed each workload's own typical pods
(an oracle) and `gputopo` learns from the pods it sees; with `--history` both know the day
before instead (`generate(seed, day=-1)`: the same cluster, mix and pattern, other jobs): `fgd`
its typical pods, `gputopo` its pods counted before the first arrival, as a scheduler that ran
the day before would have them. `bestfit`, `random` and `spread` read no workload.

Runtime: scheduler/sim/README.md, "Generated workloads".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.living_cluster import (
    WAIT_COLUMNS,
    add_config_flag,
    one_run,
    seeds_of,
    study_names,
    table,
)
from scheduler.cli.simulate_generated import add_size_flags, size_of, size_text
from scheduler.config import load_config
from scheduler.sim.generalise import (
    PEERS,
    SUBJECT,
    Figure,
    Outcomes,
    WorkloadFigures,
    figures_document,
    figures_from_document,
    format_rows,
    format_summary,
    pairs,
    run_one,
    summarise,
)
from scheduler.sim.generate import Size, generate
from scheduler.sim.policies import POLICIES
from scheduler.sim.protocol import RunResult

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = ROOT / ".cache" / "generalise"
CODE_DIRS = ("scheduler", "agent")
CODE_SUFFIXES = (".py", ".yaml", ".json")
KNOW_HISTORY = frozenset({"fgd", SUBJECT})  # what the others decide does not read a workload
CONFIDENCE = 0.95
RESAMPLES = 9_999
FIGURES: tuple[tuple[Figure, str], ...] = (("mean_wait", "mean wait"), ("makespan", "makespan"))


def seed_ranges(tuning: str, judging: str) -> tuple[list[int], list[int]]:
    """The tuning and judging seeds (`1-10`, `1,2,3` or `none`); ValueError when they share
    one or both are none."""
    tune, judge = _seeds_or_none(tuning), _seeds_or_none(judging)
    shared = sorted(set(tune) & set(judge))
    if shared:
        listed = ", ".join(str(s) for s in shared[:5]) + (", ..." if len(shared) > 5 else "")
        raise ValueError(
            f"--tuning {tuning} and --judging {judging} share seeds ({listed}): a policy must "
            "be judged on workloads it was not tuned on"
        )
    if not tune and not judge:
        raise ValueError("--tuning and --judging are both none: nothing to run")
    return tune, judge


def _seeds_or_none(text: str) -> list[int]:
    return [] if text.strip() == "none" else seeds_of(text)


def code_digest(root: Path = ROOT) -> str:
    """sha256 over the paths and bytes of the scheduler's and agent's code and data files."""
    digest = hashlib.sha256()
    for top in CODE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix in CODE_SUFFIXES and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class RunKey:
    """One run of the study: what its figures depend on, bar the code."""

    seed: int
    size: Size
    policy: str
    sim_seed: int
    config: str | None  # the --config path
    history: bool = False  # the day before known (only to the policies in `KNOW_HISTORY`)
    day: int = 0  # the workload of another day of the seed (-1: the day before)

    def file_name(self, config_digest: str, code: str) -> str:
        size = self.size
        shape = f"{size.jobs}j{size.gpu_nodes}g{size.cpu_nodes}c{size.load:g}l"
        keyed = code[:16] if self.policy == SUBJECT else "any"
        known = "-history" if self.history else ""
        day = f"-day{self.day}" if self.day else ""
        return (
            f"gen{self.seed}{day}-{shape}-{self.policy}-sim{self.sim_seed}-"
            f"cfg{config_digest[:12]}{known}-code{keyed}.json"
        )


@dataclass(slots=True)
class Cache:
    """The run figures on disk (module docstring); `directory` None: nothing is kept."""

    directory: Path | None
    code: str
    config_digest: str
    recompute: frozenset[str]
    stale: int = 0  # peers' entries computed at other code
    hits: int = 0

    def load(self, key: RunKey) -> tuple[WorkloadFigures, float] | None:
        if self.directory is None or key.policy in self.recompute:
            return None
        path = self.directory / key.file_name(self.config_digest, self.code)
        try:
            doc = json.loads(path.read_text())
            figures = figures_from_document(doc["figures"])
        except (OSError, ValueError, KeyError):
            return None
        self.hits += 1
        self.stale += doc.get("code") != self.code
        return figures, float(doc.get("seconds", 0.0))

    def store(self, key: RunKey, figures: WorkloadFigures, seconds: float) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / key.file_name(self.config_digest, self.code)
        doc = {"figures": figures_document(figures), "seconds": seconds, "code": self.code}
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(doc, indent=1) + "\n")
        partial.replace(path)


def compute(key: RunKey) -> tuple[WorkloadFigures, float]:
    """One run (in a worker process): its figures and the seconds it took."""
    began = time.perf_counter()
    config = load_config(key.config) if key.config else None
    history = generate(key.seed, key.size, day=key.day - 1).workload if key.history else None
    made = generate(key.seed, key.size, day=key.day)
    figures = run_one(made, key.policy, key.sim_seed, True, config, history)
    return figures, time.perf_counter() - began


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tuning", default="1-10", help="seeds of the tuning workloads (or none)")
    p.add_argument("--judging", default="101-130", help="seeds of the judging workloads (or none)")
    p.add_argument("--sim-seeds", default="1-3", help="the simulator's seeds, per workload")
    add_run_flags(p)
    p.add_argument(
        "--beside",
        default="builtin,mixes",
        help="studies of bench/living_cluster.py reported beside (none: no study)",
    )
    p.add_argument("--beside-seeds", default="1-3")
    p.add_argument(
        "--history",
        action="store_true",
        help="fgd and gputopo know the day before (the same seed's other jobs), not fgd this "
        "day's own workload",
    )
    p.add_argument(
        "--recompute", default="", help="policies computed afresh (comma-separated, or all)"
    )
    args = p.parse_args(argv)
    try:
        args.tuning_seeds, args.judging_seeds = seed_ranges(args.tuning, args.judging)
        args.sim_seed_list = seeds_of(args.sim_seeds)
        args.beside = [] if args.beside == "none" else study_names(args.beside)
        args.recompute_set = _policies_named(args.recompute)
        args.size = size_of(args)
    except ValueError as exc:
        p.error(str(exc))
    return args


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a study of generated workloads that say how its runs are made and kept:
    the workloads' size, the processes, the cache, `--config`."""
    add_size_flags(p)
    p.add_argument("--jobs", type=int, default=2, help="processes")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="directory of run figures")
    p.add_argument("--no-cache", action="store_true", help="keep no run figures")
    add_config_flag(p)


def _policies_named(text: str) -> frozenset[str]:
    names = {p.strip() for p in text.split(",") if p.strip()}
    if "all" in names:
        return frozenset(POLICIES)
    unknown = sorted(names - set(POLICIES))
    if unknown:
        raise ValueError(f"--recompute: unknown policy {', '.join(unknown)} (known: all, ...)")
    return frozenset(names)


Pending = Future[tuple[WorkloadFigures, float]]


@dataclass(slots=True)
class Runs:
    """The runs of one seed range: cached ones done, the others submitted."""

    keys: list[RunKey]
    done: dict[RunKey, tuple[WorkloadFigures, float]]
    pending: dict[RunKey, Pending]


def _submit(
    pool: ProcessPoolExecutor,
    cache: Cache,
    seeds: Sequence[int],
    size: Size,
    args: argparse.Namespace,
) -> Runs:
    keys = [
        RunKey(
            seed=seed,
            size=size,
            policy=policy,
            sim_seed=sim_seed,
            config=args.config,
            history=args.history and policy in KNOW_HISTORY,
        )
        for sim_seed in args.sim_seed_list  # a study stopped early has whole simulator seeds
        for seed in seeds
        for policy in POLICIES
    ]
    return start_runs(pool, cache, keys)


def start_runs(pool: ProcessPoolExecutor, cache: Cache, keys: Sequence[RunKey]) -> Runs:
    """The cached runs of `keys` loaded, the others submitted to `pool`."""
    runs = Runs(keys=list(keys), done={}, pending={})
    for key in keys:
        cached = cache.load(key)
        if cached is not None:
            runs.done[key] = cached
        else:
            runs.pending[key] = pool.submit(compute, key)
    return runs


def finish_runs(runs: Runs, cache: Cache) -> dict[RunKey, WorkloadFigures]:
    """Every run's figures, in the order of its keys; those computed now are stored."""
    for key, future in runs.pending.items():
        figures, seconds = future.result()
        cache.store(key, figures, seconds)
        runs.done[key] = (figures, seconds)
    return {key: runs.done[key][0] for key in runs.keys}


def outcomes_of(figures: Iterable[WorkloadFigures]) -> dict[str, list[WorkloadFigures]]:
    """Runs grouped by workload label, in the order they come."""
    outcomes: dict[str, list[WorkloadFigures]] = {}
    for run in figures:
        outcomes.setdefault(run.workload, []).append(run)
    return outcomes


def _collect(runs: Runs, cache: Cache) -> tuple[str, float, int]:
    """The table and summary of a range, the compute seconds of its runs, and how many ran now."""
    outcomes = outcomes_of(finish_runs(runs, cache).values())
    seconds = sum(s for _, s in runs.done.values())
    text = (
        format_rows(outcomes) + "\n" + format_summary(summarise(outcomes)) + paired_text(outcomes)
    )
    return text, seconds, len(runs.pending)


def paired_text(outcomes: Outcomes, peers: Sequence[str] = PEERS, subject: str = SUBJECT) -> str:
    """`subject` against each of `peers`, workload by workload (each workload one sample, the
    mean of its simulator seeds): per figure, the mean difference (subject minus peer; below 0
    the subject did better) in seconds and as a share of the peer's mean, its 95 % confidence
    interval (BCa bootstrap over the workloads, seeded: the same runs give the same text), the
    workloads lower and higher, and the two-sided sign test over those that differ. The
    verdict: `lower` or `higher` when the interval excludes 0, else `not told apart`."""
    try:
        import numpy as np
        from scipy import stats
    except ImportError:
        return 'paired comparison: needs scipy (pip install -e ".[study]")\n'
    lines = [
        f"{subject} paired with each peer, workload by workload (difference {subject} - peer; "
        f"{CONFIDENCE:.0%} interval: BCa bootstrap over the workloads, {RESAMPLES:,} resamples):"
    ]
    for peer in peers:
        parts = []
        for figure, name in FIGURES:
            found = pairs(outcomes, peer, figure, subject)
            differences = np.array([p.difference for p in found])
            mean = float(differences.mean())
            share = mean / statistics.fmean(p.peer for p in found) if found else 0.0
            if len(found) < 2 or np.ptp(differences) == 0:
                low = high = mean
            else:
                interval = stats.bootstrap(
                    (differences,),
                    np.mean,
                    confidence_level=CONFIDENCE,
                    n_resamples=RESAMPLES,
                    rng=np.random.default_rng(0),
                ).confidence_interval
                low, high = float(interval.low), float(interval.high)
            lower, higher = int((differences < 0).sum()), int((differences > 0).sum())
            p_value = stats.binomtest(lower, lower + higher).pvalue if lower + higher else 1.0
            verdict = "lower" if high < 0 else "higher" if low > 0 else "not told apart"
            parts.append(
                f"{name} {mean:+,.0f} s ({share:+.1%}; {low:+,.0f} to {high:+,.0f} s): "
                f"{verdict}; lower on {lower}, higher on {higher}, sign test p {p_value:.2f}"
            )
        lines.append(f"  vs {peer} over {len(found)} workloads: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def _beside(pool: ProcessPoolExecutor, args: argparse.Namespace) -> str:
    seeds = seeds_of(args.beside_seeds)
    work = [(s, p, seed) for s in args.beside for p in POLICIES for seed in seeds]
    futures = [pool.submit(one_run, s, p, seed, True, args.config) for s, p, seed in work]
    results: dict[str, list[RunResult]] = {s: [] for s in args.beside}
    for future in futures:
        study, run = future.result()
        results[study].append(run)
    return "".join(
        f"\n## {study} (seeds {args.beside_seeds})\n"
        + table(runs)
        + "\n"
        + table(runs, WAIT_COLUMNS)
        for study, runs in results.items()
    )


def _cache_of(args: argparse.Namespace) -> Cache:
    config_text = Path(args.config).read_bytes() if args.config else b"default"
    return Cache(
        directory=None if args.no_cache else args.cache,
        code=code_digest(),
        config_digest=hashlib.sha256(config_text).hexdigest(),
        recompute=args.recompute_set,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    size: Size = args.size
    cache = _cache_of(args)
    began = time.perf_counter()
    ranges = [
        (name, seeds, text)
        for name, seeds, text in (
            ("tuning", args.tuning_seeds, args.tuning),
            ("judging", args.judging_seeds, args.judging),
        )
        if seeds
    ]
    compute_s, computed = 0.0, 0
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        submitted = [
            (name, text, _submit(pool, cache, seeds, size, args)) for name, seeds, text in ranges
        ]
        for name, text, runs in submitted:
            body, seconds, ran = _collect(runs, cache)
            compute_s, computed = compute_s + seconds, computed + ran
            known = "the day before" if args.history else "fgd: this day's own typical pods"
            sys.stdout.write(
                f"## {name} workloads (seeds {text}; {size_text(size)}; simulator seeds "
                f"{args.sim_seeds}; known in advance: {known})\n{body}\n"
            )
            sys.stdout.flush()
        sys.stdout.write(_beside(pool, args))
    elapsed = time.perf_counter() - began
    sys.stdout.write(
        f"\ngenerated runs: {computed} computed, {cache.hits} from the cache"
        + (f" ({cache.stale} of them computed at other code)" if cache.stale else "")
        + f"; their compute time {compute_s:,.0f} s of one process (cached ones as measured)\n"
        f"{elapsed:.0f} s on {args.jobs} processes\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
