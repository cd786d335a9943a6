"""`scheduler.sim.tenants`: `--tenants` shares, queues and the stable, even job split."""

from __future__ import annotations

from collections import Counter

import pytest

from scheduler.sim.tenants import assign_tenants, parse_shares, tenant_queues, tenant_workload
from scheduler.sim.workload import Job, PodSpec, Workload

GPU = "nvidia.com/gpu"


def jobs(count: int) -> list[Job]:
    return [Job(name=f"openb-pod-{i:04d}", pod=PodSpec(gpus=1)) for i in range(count)]


def test_assignment_is_deterministic_and_independent_of_order():
    first = {j.name: j.queue for j in assign_tenants(jobs(500), 4)}
    again = {j.name: j.queue for j in assign_tenants(list(reversed(jobs(500))), 4)}
    assert first == again
    assert set(first.values()) == {"t1", "t2", "t3", "t4"}


def test_assignment_is_even_whatever_the_guarantees():
    counts = Counter(j.queue for j in assign_tenants(jobs(8000), 4))
    for tenant in ("t1", "t2", "t3", "t4"):
        assert abs(counts[tenant] / 8000 - 0.25) < 0.02, counts


@pytest.mark.parametrize(
    ("hard", "maximum"),
    [pytest.param(False, None, id="borrow"), pytest.param(True, 3000, id="hard")],
)
def test_tenant_queues_min_is_the_share_of_gpus_rounded_down(hard: bool, maximum: int | None):
    queues = tenant_queues([33, 33, 34], 10, hard)
    assert [q.name for q in queues] == ["t1", "t2", "t3"]
    assert [q.min[GPU] for q in queues] == [3000, 3000, 3000]
    assert queues[0].max.get(GPU) == maximum
    assert all(q.parent is None and not q.problem for q in queues)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("40,x", "expected percentages", id="not a number"),
        pytest.param("40,0", "whole percentage >= 1", id="zero"),
        pytest.param("60,50", "sum to 110%", id="over 100"),
    ],
)
def test_bad_shares(text: str, message: str):
    with pytest.raises(ValueError, match=message):
        parse_shares(text)


def test_a_workload_with_its_own_queues_is_not_split():
    workload = tenant_workload(Workload(tuple(jobs(3))), [50, 50], 8, hard=False)
    assert [q.name for q in workload.queues] == ["t1", "t2"]
    with pytest.raises(ValueError, match="already defines queues"):
        tenant_workload(workload, [50, 50], 8, hard=False)
