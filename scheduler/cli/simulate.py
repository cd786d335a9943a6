"""`gputopo-scheduler simulate`: the real placement code over a simulated cluster and workload.

Two modes. *Protocol* (the FGD paper's, see `protocol`): pods shuffled and inflated to
`--inflate` × GPU capacity, each tried once, nothing departs; the default for a trace pod list
(CSV) and whenever `--inflate` is given. *Events* (see `events`): jobs arrive at their times, run
for their durations, gangs wait; the default for a YAML/JSON workload.

Every flag can also be set with an environment variable `GPUTOPO_<FLAG>` (`GPUTOPO_POLICY=fgd`);
a flag wins over the variable. `--config` is the scheduler config the `default` policy uses.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent import logsetup
from agent.errors import AgentError
from agent.precedence import env_var, first_value, from_env, from_flag
from scheduler.config import SchedulerConfig, load_config
from scheduler.sim.events import run_events
from scheduler.sim.policies import POLICIES
from scheduler.sim.protocol import RunResult, run_protocol
from scheduler.sim.report import format_table, plot_runs, runs_document
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
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Replay a workload on a simulated cluster with the real placement code.",
        epilog=f"Built-in clusters: {', '.join(builtin_names('cluster'))}; "
        f"workloads: {', '.join(builtin_names('workload'))}. "
        "Each flag is also read from GPUTOPO_<FLAG> (e.g. GPUTOPO_POLICY).",
    )
    p.add_argument("--cluster", help="built-in name, YAML file or trace node-list CSV")
    p.add_argument("--workload", help="built-in name, YAML/JSON file or trace pod-list CSV")
    p.add_argument("--policy", help=f"comma-separated, from {','.join(POLICIES)} (default: all)")
    p.add_argument("--inflate", help="protocol mode: arrived GPU demand / capacity (default 1.3)")
    p.add_argument("--seed", help="comma-separated seeds (default 42)")
    p.add_argument("--mode", choices=("auto", "protocol", "events"), help="default: auto")
    p.add_argument(
        "--tenants",
        help="event mode: split the jobs over leaf queues t1..tN, one per percentage (e.g. "
        "40,30,20,10): min = that %% of the cluster's GPUs (rounded down); each job goes to a "
        "tenant by a stable hash (SHA-256) of its name, evenly (same work, different guarantees)",
    )
    p.add_argument(
        "--quota",
        help="with --tenants: borrow (max unlimited, the default) or hard (max = min)",
    )
    p.add_argument("--config", help="scheduler config file for the default policy")
    p.add_argument("--json", action="store_true", help="print the DESIGN §8 JSON document")
    p.add_argument("--plot", help="write allocation vs arrived demand to this PNG file")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
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
    names = [p.strip() for p in text.split(",") if p.strip()]
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
    hard_quota: bool = False


def _run_all(
    spec: ClusterSpec, workload: Workload, settings: Settings, config: SchedulerConfig | None
) -> list[RunResult]:
    runs = []
    for policy in settings.policies:
        for seed in settings.seeds:
            progress = _progress(f"{policy} seed {seed}")
            if settings.mode == "events":
                run = run_events(spec, workload, policy, seed, config=config, progress=progress)
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


def _quota(text: str) -> bool:
    if text not in ("borrow", "hard"):
        raise UsageError(f"--quota: must be borrow or hard, got {text!r}")
    return text == "hard"


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
        hard_quota=_quota(_setting(args, "quota", environ, "borrow")),
    )


def _split(workload: Workload, spec: ClusterSpec, shares: list[int], hard: bool) -> Workload:
    try:
        return tenant_workload(workload, shares, spec.gpu_count, hard)
    except ValueError as exc:
        raise UsageError(f"--tenants: {exc}") from None


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    args = _parser().parse_args(list(argv))
    logsetup.configure(args.log_format, logging.WARNING)
    try:
        settings = _settings(args, os.environ if environ is None else environ)
        config = load_config(settings.config) if settings.config else None
        spec = load_cluster(settings.cluster)
        workload = load_workload(settings.workload)
        if not spec.groups or not workload.jobs:
            raise UsageError("the cluster has no nodes or the workload has no jobs")
        if settings.tenants is not None:
            workload = _split(workload, spec, settings.tenants, settings.hard_quota)
        runs = _run_all(spec, workload, settings, config)
        if settings.plot:
            plot_runs(runs, Path(settings.plot), title=Path(workload.source).name)
    except (UsageError, WorkloadError, TraceError, AgentError) as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    if args.json:
        sys.stdout.write(json.dumps(runs_document(runs), indent=2) + "\n")
    else:
        sys.stdout.write(format_table(runs))
    return 0
