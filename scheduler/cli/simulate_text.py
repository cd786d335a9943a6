"""What `simulate` prints around its table: the inputs (a header, and `inputs` in the JSON), the
cluster/workload mismatches found before running, and one line per column saying what it means
(every figure is defined in full in `scheduler/sim/README.md`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.dispatch import package_version
from scheduler.sim.fit import never_fit, peak_demand_gpus
from scheduler.sim.replay import STUDY_LOAD, STUDY_NODES, STUDY_START
from scheduler.sim.workload import ClusterSpec, Workload

__all__ = [
    "LIGHT_LOAD",
    "header",
    "inputs_document",
    "legend",
    "light_load_line",
    "mismatch_lines",
    "warning_lines",
]

LIGHT_LOAD = 0.5  # an event-mode workload that never asks this share of the GPUs at once is light

_PROTOCOL_LEGEND = (
    "alloc@N%: GPUs allocated (% of the cluster's GPU capacity) once the pods that arrived ask "
    "N % of it (FGD paper's protocol: pods shuffled, each tried once, nobody leaves)",
    "fragmented%: GPU capacity the workload's typical pods cannot use, at the end (FGD's measure, "
    "% of capacity); fragmented GPUs: GPUs partly used at the end",
)
_EVENTS_LEGEND = (
    "alloc mean% / peak%: GPUs allocated, time-weighted over the whole run to the last departure "
    "(a trace replay's long recorded durations pull the mean down: read util%), and the peak",
    "util%: GPUs allocated, time-weighted from the first to the last arrival; frag over time%: "
    "FGD's measure sampled over that window",
    "fragmented% / GPUs: the same measure, and GPUs partly used, as the last job arrived",
    "gang wait s: mean wait of gangs from arrival to start; 8-GPU max wait s: the longest wait "
    "of a pod asking 8 GPUs; wait table: per pod class, from the job's arrival to the pod's start",
)


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
        )
    doc["nodeShare"] = settings.node_share
    return doc


def header(inputs: Mapping[str, Any]) -> str:
    """Two lines naming what was run."""
    mode = (
        f"protocol, pods inflated to {inputs['inflate'] * 100:g} % of GPU capacity"
        if inputs["mode"] == "protocol"
        else "events (arrivals, durations, gangs wait)"
    )
    return (
        f"cluster {_name(inputs['cluster'])} ({inputs['nodes']:,} nodes, {inputs['gpus']:,} GPUs); "
        f"workload {_name(inputs['workload'])} ({inputs['jobs']:,} jobs, {inputs['pods']:,} pods)\n"
        f"mode {mode}; seeds {','.join(str(s) for s in inputs['seeds'])}; "
        f"policies {', '.join(inputs['policies'])}\n"
    )


def _name(ref: str) -> str:
    return Path(ref).name if ("/" in ref or ref.endswith((".csv", ".yaml", ".json"))) else ref


def legend(events: bool) -> str:
    lines = _EVENTS_LEGEND if events else _PROTOCOL_LEGEND
    more = "  (every figure: scheduler/sim/README.md)\n"
    return "\ncolumns:\n" + "".join(f"  {line}\n" for line in lines) + more


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
