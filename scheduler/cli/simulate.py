"""`gputopo-scheduler simulate`: the real placement code over a simulated cluster and workload.

Two modes. *Protocol* (the FGD paper's, see `protocol`): pods shuffled and inflated to
`--inflate` × GPU capacity, each tried once, nothing departs; the default for a trace pod list
(CSV) and whenever `--inflate` is given. *Events* (see `events`): jobs arrive at their times, run
for their durations, gangs wait; the default for a YAML/JSON workload. A trace pod list in event
mode (`--mode events`, or `--tenants`) is the living-cluster replay (`scheduler.sim.replay`):
`--load`, `--replay-start` and `--gang-window` shape it; `--node-share` keeps a share of each kind
of node; `--shuffle-nodes` ranks the nodes by the seed in event mode (the protocol always does).

Every flag can also be set with an environment variable `GPUTOPO_<FLAG>` (`GPUTOPO_POLICY=fgd`);
a flag wins over the variable. `--config` is the scheduler config the gputopo policy uses.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import logsetup
from agent.dispatch import CommandParser, version_line
from agent.errors import AgentError
from agent.precedence import env_var, first_value, from_env, from_flag
from scheduler.cli import simulate_generated
from scheduler.cli.simulate_text import header, inputs_document, legend, warning_lines
from scheduler.config import SchedulerConfig, load_config
from scheduler.placement import default_scoring
from scheduler.preemption import PreemptionSettings
from scheduler.sim.events import run_events
from scheduler.sim.loadaware import format_studies, run_load_study
from scheduler.sim.plot import plot_problem, plot_runs, plot_title
from scheduler.sim.policies import POLICIES, canonical_policy
from scheduler.sim.protocol import RunResult, run_protocol
from scheduler.sim.replay import (
    STUDY_LOAD,
    STUDY_NODES,
    STUDY_START,
    Replay,
    node_share,
    read_replay,
)
from scheduler.sim.report import format_table, replay_document, runs_document
from scheduler.sim.tenants import parse_shares, tenant_workload
from scheduler.sim.trace import TraceError
from scheduler.sim.workload import (
    ClusterSpec,
    Workload,
    WorkloadError,
    builtin_names,
    load_cluster,
    load_workload,
)

__all__ = ["main"]

PROG = "gputopo-scheduler simulate"
log = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog=PROG,
        description="Replay a workload on a simulated cluster with the real placement code.",
        epilog=f"Built-in clusters: {', '.join(builtin_names('cluster'))}; "
        f"workloads: {', '.join(builtin_names('workload'))}. "
        "Each flag is also read from GPUTOPO_<FLAG> (e.g. GPUTOPO_POLICY).",
    )
    p.add_argument(
        "--cluster", help="built-in name, YAML file or trace node-list CSV (default: default)"
    )
    p.add_argument(
        "--workload",
        help="built-in name, YAML/JSON file or trace pod-list CSV (default: default)",
    )
    p.add_argument(
        "--policy",
        help=f"comma-separated, from {','.join(POLICIES)}; gputopo is this scheduler, spread "
        "the stock default-scheduler's LeastAllocated (default: all of them)",
    )
    p.add_argument("--inflate", help="protocol mode: arrived GPU demand / capacity (default: 1.3)")
    p.add_argument(
        "--seed", help="comma-separated seeds (default: 42; with --generated, the simulator's: 1)"
    )
    p.add_argument(
        "--mode",
        choices=("auto", "protocol", "events"),
        help="protocol for a trace pod list or with --inflate, else events (default: auto)",
    )
    p.add_argument(
        "--tenants",
        help="event mode: split the jobs over leaf queues t1..tN, one per percentage (e.g. "
        "40,30,20,10): min = that %% of the cluster's GPUs (rounded down); each job goes to a "
        "tenant by a stable hash (SHA-256) of its name, evenly (same work, different guarantees; "
        "default: no queues)",
    )
    p.add_argument(
        "--quota",
        help="with --tenants: borrow (max unlimited, no reclaim), hard (max = min), or "
        "borrow+reclaim (borrow, and reclaim as the scheduler's `preemption:` defaults run it) "
        "(default: borrow)",
    )
    p.add_argument(
        "--no-preemption",
        action="store_true",
        help="event mode: run without the `preemption:` block (no priority preemption, reclaim "
        "or starvation holds; default: the config's, the shipped defaults, for every policy)",
    )
    p.add_argument(
        "--load",
        help="event-mode trace replay: K times the recorded arrival rate (arrival times / K; "
        f"durations as recorded; the studies use {STUDY_LOAD:g}) (default: 1)",
    )
    p.add_argument(
        "--replay-start",
        help="event-mode trace replay: begin at this recorded second, from the pods running then "
        f"(the studies use {STUDY_START}) (default: the first arrival)",
    )
    p.add_argument(
        "--gang-window",
        help="event-mode trace replay: multi-GPU pods of one shape created within this many "
        "recorded seconds of the first form one gang (default: no gangs)",
    )
    p.add_argument(
        "--node-share",
        help="keep this share (0..1] of each kind of node (default 1; the trace studies use "
        f"{STUDY_NODES:g}) (default: 1)",
    )
    p.add_argument(
        "--shuffle-nodes",
        action="store_true",
        help="event mode: rank the nodes by the seed, so ties fall on another node order per seed "
        "(default: the given order)",
    )
    p.add_argument(
        "--config",
        help="scheduler config file for the gputopo policy (default: the shipped scoring)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print every run as one JSON document (scheduler/sim/README.md defines its fields) "
        "instead of the table (default: the table)",
    )
    p.add_argument(
        "--plot",
        help="write a PNG: allocation vs arrived demand (protocol), allocation and fragmentation "
        "vs time (events); .png, .pdf or .svg (default: no plot)",
    )
    p.add_argument(
        "--load-aware",
        action="store_true",
        help="the load-aware study (issue 47): the workload placed with load-awareness off, then "
        "on; every figure of both runs (defaults: --cluster load --workload load)",
    )
    simulate_generated.add_arguments(p)
    p.add_argument("--log-format", choices=("text", "json"), default="text", help="(default: text)")
    p.add_argument("--version", action="version", version=version_line(PROG))
    return p


class UsageError(ValueError):
    """A bad flag value (the message names the flag)."""


def _setting(args: argparse.Namespace, flag: str, environ: Mapping[str, str], default: str) -> str:
    flagged = from_flag(f"--{flag}", getattr(args, flag))
    return str(first_value(flagged, from_env(environ, env_var(flag)), default=default))


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--{flag}: expected integers separated by commas, got {text!r}") from None
    if not values:
        raise UsageError(f"--{flag}: no value given")
    return values


def _policies(text: str) -> list[str]:
    names = [canonical_policy(p.strip()) for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise UsageError(f"--policy: unknown {unknown or text!r} (known: {', '.join(POLICIES)})")
    return list(dict.fromkeys(names))


def _inflate(text: str) -> float:
    try:
        ratio = float(text)
    except ValueError:
        raise UsageError(f"--inflate: expected a number, got {text!r}") from None
    if ratio <= 0:
        raise UsageError(f"--inflate: must be > 0, got {ratio}")
    return ratio


def _progress(label: str) -> Callable[[int, int], None] | None:
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        sys.stderr.write(f"\r{label} [{bar}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    cluster: str
    workload: str
    policies: list[str]
    seeds: list[int]
    inflate: float
    mode: str  # protocol | events
    config: str
    plot: str
    tenants: list[int] | None = None
    quota: str = "borrow"  # borrow | hard | borrow+reclaim

    @property
    def hard_quota(self) -> bool:
        return self.quota == "hard"

    load: float = 1.0
    replay_start: int | None = None
    gang_window: float | None = None
    node_share: float = 1.0
    shuffle_nodes: bool = False
    preemption: bool = True  # event mode: the config's `preemption:` (--no-preemption: off)


def _preemption(settings: Settings, config: SchedulerConfig | None) -> PreemptionSettings | bool:
    """What event mode runs: the config's `preemption:` block (reclaim only with
    `--quota borrow+reclaim` when there are tenants), or nothing."""
    if not settings.preemption:
        return False
    shipped = (config or load_config(None)).preemption
    if settings.tenants is not None and settings.quota != "borrow+reclaim":
        return dataclasses.replace(shipped, reclaim=False)
    return shipped


def _run_all(
    spec: ClusterSpec, workload: Workload, settings: Settings, config: SchedulerConfig | None
) -> list[RunResult]:
    runs = []
    for policy in settings.policies:
        for seed in settings.seeds:
            progress = _progress(f"{policy} seed {seed}")
            if settings.mode == "events":
                run = run_events(
                    spec,
                    workload,
                    policy,
                    seed,
                    config=config,
                    progress=progress,
                    shuffle_nodes=settings.shuffle_nodes,
                    preemption=_preemption(settings, config),
                )
            else:
                run = run_protocol(
                    spec,
                    workload,
                    policy,
                    seed,
                    ratio=settings.inflate,
                    config=config,
                    progress=progress,
                )
            log.info("policy %s seed %s done", policy, seed)
            runs.append(run)
    return runs


def _tenants(text: str, mode: str) -> list[int] | None:
    if not text:
        return None
    if mode == "protocol":
        raise UsageError("--tenants: queues run in event mode only (--mode events)")
    try:
        return parse_shares(text)
    except ValueError as exc:
        raise UsageError(f"--tenants: {exc}") from None


def _number(text: str, flag: str, top: float | None = None) -> float | None:
    """A number > 0 (and <= `top`), or None when `text` is empty."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--{flag}: expected a number, got {text!r}") from None
    if value <= 0 or (top is not None and value > top):
        bound = f"in (0, {top:g}]" if top is not None else "> 0"
        raise UsageError(f"--{flag}: must be {bound}, got {text}")
    return value


def _replay_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any]:
    start = _setting(args, "replay_start", environ, "")
    window = _setting(args, "gang_window", environ, "")
    return {
        "load": _number(_setting(args, "load", environ, ""), "load") or 1.0,
        "replay_start": None if not start else int(_ints(start, "replay-start")[0]),
        "gang_window": None if not window else float(_ints(window, "gang-window")[0]),
        "node_share": _number(_setting(args, "node_share", environ, ""), "node-share", 1.0) or 1.0,
        "shuffle_nodes": bool(args.shuffle_nodes),
    }


QUOTAS = ("borrow", "hard", "borrow+reclaim")


def _quota(text: str) -> str:
    if text not in QUOTAS:
        raise UsageError(f"--quota: must be one of {', '.join(QUOTAS)}, got {text!r}")
    return text


def _settings(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    workload_ref = _setting(args, "workload", environ, "default")
    inflate_text = _setting(args, "inflate", environ, "")
    tenants_text = _setting(args, "tenants", environ, "")
    mode = _setting(args, "mode", environ, "auto")
    if mode not in ("auto", "protocol", "events"):
        raise UsageError(f"--mode: must be auto, protocol or events, got {mode!r}")
    if mode == "auto":
        by_protocol = inflate_text or (workload_ref.endswith(".csv") and not tenants_text)
        mode = "protocol" if by_protocol else "events"
    return Settings(
        cluster=_setting(args, "cluster", environ, "default"),
        workload=workload_ref,
        policies=_policies(_setting(args, "policy", environ, ",".join(POLICIES))),
        seeds=_ints(_setting(args, "seed", environ, "42"), "seed"),
        inflate=_inflate(inflate_text or "1.3"),
        mode=mode,
        config=_setting(args, "config", environ, ""),
        plot=_setting(args, "plot", environ, ""),
        tenants=_tenants(tenants_text, mode),
        quota=_quota(_setting(args, "quota", environ, "borrow")),
        preemption=not args.no_preemption,
        **_replay_settings(args, environ),
    )


def _split(workload: Workload, spec: ClusterSpec, shares: list[int], hard: bool) -> Workload:
    try:
        return tenant_workload(workload, shares, spec.gpu_count, hard)
    except ValueError as exc:
        raise UsageError(f"--tenants: {exc}") from None


def _inputs(settings: Settings) -> tuple[ClusterSpec, Workload, Replay | None]:
    """The cluster, the workload and, for a trace in event mode, the replay it came from."""
    spec = load_cluster(settings.cluster)
    if settings.node_share < 1:
        spec = node_share(spec, settings.node_share)
    if settings.mode != "events" or not settings.workload.endswith(".csv"):
        return spec, load_workload(settings.workload), None
    replay = read_replay(
        Path(settings.workload),
        load=settings.load,
        gang_window=settings.gang_window,
        start=settings.replay_start,
    )
    return spec, replay.workload, replay


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    args = _parser().parse_args(list(argv))
    logsetup.configure(args.log_format, logging.WARNING)
    if args.load_aware:
        return _load_study(args)
    if args.generated is not None:
        return _generated(args, os.environ if environ is None else environ)
    try:
        settings = _settings(args, os.environ if environ is None else environ)
        if settings.plot and (problem := plot_problem(Path(settings.plot))):
            raise UsageError(f"--plot: {problem}")
        config = load_config(settings.config) if settings.config else None
        spec, workload, replay = _inputs(settings)
        if not spec.groups or not workload.jobs:
            raise UsageError("the cluster has no nodes or the workload has no jobs")
        if settings.tenants is not None:
            workload = _split(workload, spec, settings.tenants, settings.hard_quota)
        inputs = inputs_document(settings, spec, workload)
        for line in warning_lines(settings, spec, workload):
            sys.stderr.write(f"{PROG}: {line}\n")
        runs = _run_all(spec, workload, settings, config)
        if settings.plot:
            plot_runs(runs, Path(settings.plot), title=plot_title(inputs))
            sys.stderr.write(f"{PROG}: wrote the plot to {Path(settings.plot).resolve()}\n")
    except (UsageError, WorkloadError, TraceError, AgentError) as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    if args.json:
        document = {"inputs": inputs, **runs_document(runs, replay)}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(header(inputs))
        if replay is not None:
            sys.stdout.write(_replay_line(replay))
        tables = format_table(runs)
        sys.stdout.write(tables + legend(tables))
    return 0


def _load_study(args: argparse.Namespace) -> int:
    """`--load-aware`: the same inputs placed with load-awareness off and on, every figure."""
    try:
        spec = load_cluster(args.cluster or "load")
        workload = load_workload(args.workload or "load")
        config = load_config(args.config) if args.config else None
    except (UsageError, WorkloadError, TraceError, AgentError) as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    scoring = config.scoring() if config is not None else default_scoring()
    studies = [run_load_study(spec, workload, scoring, load_aware=on) for on in (False, True)]
    title = f"load-aware study: cluster {spec.source}, workload {workload.source}"
    sys.stdout.write(format_studies(studies, title))
    return 0


def _generated(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """`--generated N`: generated workloads, every policy, the table and its summary."""
    try:
        policies = _policies(_setting(args, "policy", environ, ",".join(POLICIES)))
        if problem := simulate_generated.problem(args, policies):
            raise UsageError(problem)
        sim_seeds = _ints(_setting(args, "seed", environ, "1"), "seed")
        config = load_config(args.config) if args.config else None
        text = simulate_generated.run_generated_study(args, policies, sim_seeds, config)
    except (UsageError, WorkloadError, AgentError) as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    sys.stdout.write(text)
    return 0


def _replay_line(replay: Replay) -> str:
    doc = replay_document(replay)
    return (
        f"replay: {doc['podsReplayed']} of {doc['podsInTrace']} pods; {doc['neverRan']} never "
        f"ran in production and {doc['endedBeforeStart']} ended before the start "
        f"({doc['start']} s), left out; load {doc['load']:g}; {doc['gangs']} gangs; "
        f"arrival window {doc['arrivalWindowSeconds']:,.0f} s\n"
    )
