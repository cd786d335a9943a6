"""`--tenants`: split a workload's jobs over one leaf queue per tenant.

`--tenants 40,30,20,10` (`tenant_queues`, `assign_tenants`): one leaf queue per share, `t1`, `t2`,
... under the root, `min` = that percentage of the cluster's whole GPUs rounded down, `max`
unlimited (borrowing) or equal to `min` (`hard`). Each job goes to a tenant chosen by a stable hash
of its name (SHA-256, not Python's salted `hash`), evenly: every tenant submits about the same
work and only their guarantees differ, so the small tenants need to borrow and the big ones leave
guarantee idle, which is what quotas are for. The same workload always splits the same way. (The
Alibaba trace has no user or group column to split by.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from agent.resource_names import GPU_RESOURCE
from scheduler.quota import QueueSpec, read_queue
from scheduler.sim.workload import Job, Workload

__all__ = ["assign_tenants", "parse_shares", "tenant_queues", "tenant_workload"]


def parse_shares(text: str) -> list[int]:
    """`40,30,20,10` -> [40, 30, 20, 10]: whole percentages, each >= 1, summing to <= 100."""
    try:
        shares = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"expected percentages separated by commas, got {text!r}") from None
    if not shares or any(s < 1 for s in shares):
        raise ValueError(f"every share must be a whole percentage >= 1, got {text!r}")
    if sum(shares) > 100:
        raise ValueError(f"the shares sum to {sum(shares)}% (at most 100%)")
    return shares


def tenant_queues(shares: Sequence[int], gpu_count: int, hard: bool) -> tuple[QueueSpec, ...]:
    """Leaf queues `t1..tN` with min = share% of `gpu_count` GPUs (rounded down); max = min when
    `hard`, else unlimited."""
    specs = []
    for i, share in enumerate(shares, start=1):
        gpus = gpu_count * share // 100
        spec = {"min": {GPU_RESOURCE: gpus}}
        if hard:
            spec["max"] = {GPU_RESOURCE: gpus}
        specs.append(read_queue({"metadata": {"name": f"t{i}"}, "spec": spec}))
    return tuple(specs)


def assign_tenants(jobs: Sequence[Job], tenants: int) -> tuple[Job, ...]:
    """Each job in queue `tK`, K (1..`tenants`) from the stable hash of its name."""
    out = []
    for job in jobs:
        digest = hashlib.sha256(job.name.encode("utf-8")).digest()
        tenant = 1 + int.from_bytes(digest[:8], "big") % tenants
        out.append(replace(job, queue=f"t{tenant}"))
    return tuple(out)


def tenant_workload(
    workload: Workload, shares: Sequence[int], gpu_count: int, hard: bool
) -> Workload:
    """`workload` split over `--tenants` queues (see the module docstring)."""
    if workload.queues:
        raise ValueError("the workload already defines queues")
    return replace(
        workload,
        jobs=assign_tenants(workload.jobs, len(shares)),
        queues=tenant_queues(shares, gpu_count, hard),
    )
