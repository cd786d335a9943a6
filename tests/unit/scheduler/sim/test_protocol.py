"""`scheduler.sim.protocol`: the FGD paper's shuffle/inflate/place-once protocol and its metrics."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from scheduler.placement import Assignment
from scheduler.sim.cluster import Cluster
from scheduler.sim.protocol import SimPod, allocation_by_arrival, inflate, run_protocol
from scheduler.sim.workload import PodSpec, load_cluster, load_workload
from tests.builders.sim import write_trace

WHOLE = PodSpec(cpu_milli=1000, gpus=1)
SHARE = PodSpec(cpu_milli=1000, gpu_milli=500)
CPU = PodSpec(cpu_milli=1000)


def pods(*specs: PodSpec) -> list[SimPod]:
    return [SimPod(name=f"p{i}", spec=s) for i, s in enumerate(specs)]


def demand(seq: list[SimPod]) -> int:
    return sum(p.spec.gpu_milli_total for p in seq)


def test_inflation_appends_draws_until_the_next_would_pass_the_target():
    base = pods(WHOLE, SHARE, CPU, WHOLE)  # 2500 milli
    out = inflate(base, capacity_milli=10_000, ratio=1.3, rng=random.Random(1))
    assert sorted(p.name for p in out[:4]) == ["p0", "p1", "p2", "p3"]  # all originals, shuffled
    assert 13_000 - 1000 < demand(out) <= 13_000
    assert {p.name for p in out[4:]} <= {"p0", "p1", "p2", "p3"}


def test_inflation_is_seeded():
    base = pods(WHOLE, SHARE, CPU, WHOLE)
    first = inflate(base, 10_000, 1.3, random.Random(42))
    assert first == inflate(base, 10_000, 1.3, random.Random(42))
    assert first != inflate(base, 10_000, 1.3, random.Random(43))


def test_a_workload_above_the_target_is_trimmed():
    base = pods(*([WHOLE] * 20))
    out = inflate(base, capacity_milli=10_000, ratio=1.3, rng=random.Random(5))
    assert demand(out) == 13_000
    assert len({p.name for p in out}) == 13


def test_allocation_by_arrival_averages_the_events_of_each_point():
    events = [(0, 0), (1000, 1000), (1004, 1000), (2000, 1500), (2600, 1500)]
    out = allocation_by_arrival(events, capacity_milli=100_000)
    assert out[1] == pytest.approx((1.0 + 1.0) / 2)
    assert out[2] == 1.5
    assert out[3] == 1.5  # round(2.6) == 3
    assert out[0] == 0.0


def test_run_on_a_tiny_trace_is_deterministic_and_consistent(tmp_path: Path):
    nodes, pod_list = write_trace(tmp_path, pods=60)
    spec, workload = load_cluster(str(nodes)), load_workload(str(pod_list))
    first = run_protocol(spec, workload, "fgd", 42)
    again = run_protocol(spec, workload, "fgd", 42)
    assert first.allocation == again.allocation
    assert first.failed == again.failed
    assert first.pods_arrived == first.pods_placed + sum(first.failed.values())
    last = max(first.allocation)  # trimmed to at most 130% of 22 GPUs: 125..130
    assert 125 <= last <= 130
    assert 0 < first.allocation[last] <= 100
    assert set(first.failed) <= {"cpu", "share", "1-gpu", "2-gpu", "4-gpu", "8-gpu"}
    assert first.decisions_per_second > 0


@pytest.mark.parametrize("policy", ["gputopo", "spread", "bestfit", "random", "fgd"])
def test_every_policy_runs(tmp_path: Path, policy: str):
    nodes, pod_list = write_trace(tmp_path, pods=30)
    result = run_protocol(load_cluster(str(nodes)), load_workload(str(pod_list)), policy, 7)
    assert result.policy == policy
    assert result.pods_placed > 0
    assert 0.0 <= result.fragmented_share <= 100.0


def test_random_is_seeded_and_fills_what_fits(tmp_path: Path):
    nodes, pod_list = write_trace(tmp_path, pods=80)
    spec, workload = load_cluster(str(nodes)), load_workload(str(pod_list))
    one, same = run_protocol(spec, workload, "random", 3), run_protocol(spec, workload, "random", 3)
    assert (one.allocation, one.failed) == (same.allocation, same.failed)
    assert one.pods_placed > 0
    assert sum(one.failed.values()) > 0  # 130% of capacity cannot all fit


def test_on_pod_hears_every_decision_in_arrival_order(tmp_path: Path) -> None:
    nodes, pod_list = write_trace(tmp_path, pods=60)
    spec, workload = load_cluster(str(nodes)), load_workload(str(pod_list))
    heard: list[tuple[str, str | None, int]] = []

    def on_pod(pod: SimPod, assignment: Assignment | None, cluster: Cluster) -> None:
        node = None if assignment is None else assignment.node
        heard.append((pod.name, node, cluster.stats().pods))

    result = run_protocol(spec, workload, "gputopo", 42, on_pod=on_pod)
    assert len(heard) == result.pods_arrived
    assert sum(node is None for _, node, _ in heard) == sum(result.failed.values())
    # told after the decision: a placed pod is already in the cluster it is shown
    placed = [count for _, node, count in heard if node is not None]
    assert placed == list(range(1, result.pods_placed + 1))
