"""Tiny simulator inputs for the `test_sim_*` tests: trace snippets and YAML documents."""

from __future__ import annotations

import random
from pathlib import Path

TRACE_NODES = """sn,cpu_milli,memory_mib,gpu,model
node-00,96000,393216,8,G2
node-01,96000,393216,8,G2
node-02,104000,524288,2,T4
node-03,104000,524288,2,T4
node-04,16000,122880,2,P100
"""

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase\n"


TIMES_HEADER = ",creation_time,deletion_time,scheduled_time"


def trace_pods(count: int = 40, seed: int = 7, timed: bool = False) -> str:
    """A seeded pod list shaped like the real one: shares, whole GPUs, a few multi-GPU and cpu;
    `timed`: with times (pod i created at 10·i, scheduled then, deleted 300 s later)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        kind = rng.random()
        if kind < 0.15:
            gpus, milli = 0, 0
        elif kind < 0.5:
            gpus, milli = 1, rng.choice((230, 470, 810))
        elif kind < 0.9:
            gpus, milli = 1, 1000
        else:
            gpus, milli = rng.choice((2, 4)), 1000
        spec = "T4" if gpus == 1 and rng.random() < 0.1 else ""
        cpu = rng.choice((4000, 8000, 12000))
        row = f"pod-{i:03d},{cpu},{cpu * 2},{gpus},{milli},{spec},LS,Running"
        rows.append(row + (f",{10 * i},{10 * i + 300},{10 * i}" if timed else ""))
    header = POD_HEADER.rstrip("\n") + TIMES_HEADER + "\n" if timed else POD_HEADER
    return header + "\n".join(rows) + "\n"


def write_trace(tmp: Path, pods: int = 40, timed: bool = False) -> tuple[Path, Path]:
    nodes, pod_list = tmp / "nodes.csv", tmp / "pods.csv"
    nodes.write_text(TRACE_NODES, encoding="utf-8")
    pod_list.write_text(trace_pods(pods, timed=timed), encoding="utf-8")
    return nodes, pod_list


CLUSTER_YAML = """version: v1
nodeGroups:
  - name: dgx
    count: 2
    fixture: dgx-h100
    cpu: 224
    memoryGiB: 2048
    topology: {gputopo.io/rack: "rack-{index/2}", gputopo.io/slot: "s{index}"}
  - name: t4
    count: 2
    gpus: 2
    model: Tesla-T4
    cpu: 32
    memoryGiB: 128
    labels: {pool: inference}
"""

WORKLOAD_YAML = """version: v1
jobs:
  - name: train
    arrival: 10
    duration: 100
    replicas: 2
    minMember: 2
    pod: {cpu: 8, memoryGiB: 64, gpus: 8}
  - name: infer
    count: 3
    interval: 5
    duration: 50
    pod: {cpu: 2, memoryMiB: 512, gpus: 1, gpuModels: [Tesla-T4]}
  - name: note
    pod: {cpu: 1, gpuShare: 250}
"""
