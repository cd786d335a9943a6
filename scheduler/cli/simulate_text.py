"""What `simulate` prints around its table: the inputs (a header, and `inputs` in the JSON), the
cluster/workload mismatches found before running, and one line per column saying what it means
(every figure is defined in full in `scheduler/sim/README.md`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.dispatch import package_version
from scheduler.sim.fit import never_fit, peak_demand_gpus
from scheduler.sim.plot import event_settings
from scheduler.sim.replay import STUDY_LOAD, STUDY_NODES, STUDY_START
from scheduler.sim.workload import ClusterSpec, Workload

__all__ = [
    "COLUMN_NOTES",
    "LIGHT_LOAD",
    "header",
    "inputs_document",
    "legend",
    "light_load_line",
    "mismatch_lines",
    "table_columns",
    "warning_lines",
]

LIGHT_LOAD = 0.5  # an event-mode workload that never asks this share of the GPUs at once is light

# One short definition per column of every table `format_table` prints; printed under the
# tables for the columns they have (each in full in scheduler/sim/README.md).
COLUMN_NOTES: dict[str, str] = {
    "runs": "runs per policy, one per seed of the header's `seeds`; each figure is the mean ± sd "
    "over them",
    "alloc@100%": "GPUs allocated (% of the cluster's GPU capacity) once the pods that arrived ask "
    "100 % of it (FGD paper's protocol: pods shuffled, each tried once, nobody leaves)",
    "alloc@130%": "the same at 130 %, where the protocol ends",
    "alloc mean%": "GPUs allocated, time-weighted over the whole run to the last departure (a "
    "trace replay's long recorded durations pull the mean down: read util%)",
    "alloc peak%": "the most GPUs allocated at once",
    "fragmented%": "GPU capacity the workload's typical pods cannot use (FGD's measure, % of "
    "capacity), at the end (events: as the last job arrived)",
    "fragmented GPUs": "GPUs partly used, at that moment",
    "gang wait s": "mean wait of gangs from arrival to start (- without gangs)",
    "jobs placed": "placed / all: pods in the protocol (each tried once), jobs in events",
    "decisions/s": "placement decisions per second spent deciding",
    "util%": "GPUs allocated, time-weighted from the first to the last arrival",
    "frag over time%": "FGD's measure sampled over that window",
    "8-GPU max wait s": "the longest wait of a pod asking 8 GPUs",
    "class": "pod class: share (< 1 GPU), 1/2/4/8-gpu, gang (any pod of a gang), cpu, mig",
    "pods": "pods of the class that arrived",
    "started": "pods of the class that started",
    "wait mean s": "mean wait from the job's arrival to the pod's start (pods that started)",
    "wait p50 s": "median wait from the job's arrival to the pod's start (pods that started)",
    "wait p99 s": "99th percentile of that wait (nearest rank)",
    "longest s": "the longest such wait",
    "seed": "the run's seed (one row per run)",
    "queue": "a leaf queue (t1..tN from --tenants)",
    "min GPUs": "the queue's guarantee",
    "max GPUs": "the queue's cap (- none)",
    "pods started": "started / arrived pods of the queue",
    "GPU-s": "GPU-seconds the queue's pods ran",
    "peak GPUs": "the most GPUs the queue held at once",
    "deficit GPU-s": "GPU-seconds of within-guarantee work pending while below min",
    "victim sets": "times preemption or reclaim chose victims",
    "pods evicted": "pods those sets evicted",
    "GPU-s lost": "GPU-seconds the evicted pods had run (they run again from the start)",
    "partial gangs": "gangs cut below minMember (must be 0)",
    "evictions without start": "victim sets after which the preemptor did not start (must be 0)",
    "holds": "starvation holds taken (nodes kept for a unit waiting past starvationSeconds)",
    "held GPU-s": "GPU-seconds those holds kept from other units",
    "mean wait s": "mean wait over every pod that started (class all)",
    "GPU-weighted wait s": "mean wait, each pod weighted by the GPUs it asks",
    "mean JCT s": "mean job completion time: arrival to the end of its last pod (jobs that ended)",
    "mean slowdown": "mean over those jobs of completion time / run time ((wait + run) / run)",
    "makespan s": "first arrival to last departure",
}


def inputs_document(settings: Any, spec: ClusterSpec, workload: Workload) -> dict[str, Any]:
    """The run's inputs as the JSON records them (`settings`: simulate's `Settings`)."""
    doc: dict[str, Any] = {
        "version": package_version(),
        "cluster": settings.cluster,
        "nodes": sum(g.count for g in spec.groups),
        "gpus": spec.gpu_count,
        "workload": settings.workload,
        "jobs": len(workload.jobs),
        "pods": sum(j.replicas for j in workload.jobs),
        "policies": list(settings.policies),
        "seeds": list(settings.seeds),
        "mode": settings.mode,
        "config": settings.config or None,
    }
    if settings.mode == "protocol":
        doc["inflate"] = settings.inflate
    else:
        doc.update(
            load=settings.load,
            replayStart=settings.replay_start,
            gangWindow=settings.gang_window,
            shuffleNodes=settings.shuffle_nodes,
            tenants=settings.tenants,
            quota=settings.quota,
            preemption=settings.preemption,
        )
    doc["nodeShare"] = settings.node_share
    return doc


def header(inputs: Mapping[str, Any]) -> str:
    """Two lines naming what was run."""
    mode = (
        f"protocol, pods inflated to {inputs['inflate'] * 100:g} % of GPU capacity"
        if inputs["mode"] == "protocol"
        else "events (arrivals, durations, gangs wait)" + event_settings(inputs)
    )
    return (
        f"cluster {_name(inputs['cluster'])} ({inputs['nodes']:,} nodes, {inputs['gpus']:,} GPUs); "
        f"workload {_name(inputs['workload'])} ({inputs['jobs']:,} jobs, {inputs['pods']:,} pods)\n"
        f"mode {mode}; seeds {','.join(str(s) for s in inputs['seeds'])}; "
        f"policies {', '.join(inputs['policies'])}\n"
    )


def _name(ref: str) -> str:
    return Path(ref).name if ("/" in ref or ref.endswith((".csv", ".yaml", ".json"))) else ref


def table_columns(tables: str) -> list[str]:
    """The column names of the tables in `tables` (`format_table`'s text), each once, in order."""
    names: dict[str, None] = {}
    for line in tables.splitlines():
        if line.startswith("policy  "):
            names.update(dict.fromkeys(re.split(r"\s{2,}", line.strip())[1:]))
    return list(names)


def legend(tables: str) -> str:
    """One line per column of `tables` saying what it means."""
    columns = [c for c in table_columns(tables) if c in COLUMN_NOTES]
    width = max((len(c) for c in columns), default=0)
    lines = "".join(f"  {c.ljust(width)}  {COLUMN_NOTES[c]}\n" for c in columns)
    return f"\ncolumns (every figure in full: scheduler/sim/README.md):\n{lines}"


def mismatch_lines(spec: ClusterSpec, workload: Workload) -> list[str]:
    """One line per reason some jobs can never be placed on this cluster."""
    return [
        f"warning: {jobs} job{'s' if jobs != 1 else ''} can never be placed: {reason}"
        for reason, jobs in sorted(never_fit(spec, workload).items())
    ]


def light_load_line(spec: ClusterSpec, workload: Workload, hint: str) -> str | None:
    """A warning when the workload never asks for `LIGHT_LOAD` of the cluster's GPUs at once (every
    job started on arrival): allocation then stays low and the policies tie, whatever they are
    (the trace replayed as recorded asks 1 % of its GPUs: `alloc mean% 0.23`). `hint`: what to
    change."""
    peak = peak_demand_gpus(workload)
    if not spec.gpu_count or peak >= LIGHT_LOAD * spec.gpu_count:
        return None
    return (
        f"warning: the workload never asks for more than {peak:,.1f} of the cluster's "
        f"{spec.gpu_count:,} GPUs at once ({100 * peak / spec.gpu_count:.1f} %), so allocation "
        f"stays low and the policies barely differ: {hint}"
    )


def warning_lines(settings: Any, spec: ClusterSpec, workload: Workload) -> list[str]:
    """What the run will not show, said before it: jobs no node can host, and in event mode a
    workload too light to load the cluster (`settings`: simulate's `Settings`)."""
    lines = mismatch_lines(spec, workload)
    if settings.mode == "events":
        hint = (
            f"raise --load (the studies: --load {STUDY_LOAD:g} --replay-start {STUDY_START} "
            f"--node-share {STUDY_NODES:g})"
            if settings.workload.endswith(".csv")
            else "use a smaller cluster or a heavier workload"
        )
        light = light_load_line(spec, workload, hint)
        if light is not None:
            lines.append(light)
    return lines
