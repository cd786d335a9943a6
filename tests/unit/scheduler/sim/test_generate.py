"""`scheduler.sim.generate`: one seed, one cluster and workload; classes, arrivals, durations and
cluster shapes as configured, on small sizes."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.model import MigMode
from agent.nvml.fixture import load_fixture
from scheduler.sim.build import build_cluster
from scheduler.sim.events import run_events
from scheduler.sim.fit import never_fit
from scheduler.sim.generate import (
    DURATION_CAP,
    MIG_FIXTURE,
    RACK_LABEL,
    JobClass,
    Pattern,
    Size,
    arrivals,
    generate,
)

TINY = Size(jobs=40, gpu_nodes=4, cpu_nodes=1)
seeds = st.integers(min_value=0, max_value=10_000)


@settings(max_examples=15, deadline=None)
@given(seed=seeds)
def test_one_seed_always_gives_the_same_workload(seed: int) -> None:
    first, again = generate(seed, TINY), generate(seed, TINY)
    assert first == again
    assert first.workload.jobs == again.workload.jobs


def test_other_seeds_give_other_workloads() -> None:
    workloads = [generate(seed, TINY).workload.jobs for seed in range(6)]
    assert all(a != b for i, a in enumerate(workloads) for b in workloads[i + 1 :])


@settings(max_examples=15, deadline=None)
@given(seed=seeds)
def test_every_class_of_the_mix_appears(seed: int) -> None:
    made = generate(seed, TINY)
    has_mig = any(g.fixture == MIG_FIXTURE for g in made.cluster.groups)
    expected = set(JobClass) - (set() if has_mig else {JobClass.MIG})
    assert set(made.mix) == expected
    assert set(made.classes.values()) == expected
    assert sum(made.mix.values()) == pytest.approx(1.0)


def test_classes_follow_the_mix_weights() -> None:
    made = generate(7, Size(jobs=3000, gpu_nodes=8, cpu_nodes=2))
    for cls, weight in made.mix.items():
        share = sum(c is cls for c in made.classes.values()) / 3000
        assert share == pytest.approx(weight, abs=0.03), cls


def test_each_class_asks_what_it_is() -> None:
    made = generate(3, Size(jobs=400, gpu_nodes=8, cpu_nodes=2))
    for job in made.workload.jobs:
        cls, pod = made.classes[job.name], job.pod
        assert job.is_gang == (cls is JobClass.GANG)
        if cls is JobClass.ONE_GPU:
            assert pod.gpus == 1
            assert not pod.gpu_models
        elif cls is JobClass.MULTI_GPU:
            assert pod.gpus in (2, 4, 8)
        elif cls is JobClass.SHARE:
            assert pod.pod_class == "share" or 0 < pod.gpu_milli < 1000
        elif cls is JobClass.CPU:
            assert pod.gpu_milli_total == 0
            assert not pod.mig
        elif cls is JobClass.PINNED:
            assert len(pod.gpu_models) == 1
        elif cls is JobClass.MIG:
            assert pod.mig == {"1g.10gb": 1}


def _gaps_cv(times: list[float]) -> float:
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


def test_bursts_cluster_in_time_and_steady_arrivals_do_not() -> None:
    steady = arrivals(random.Random(1), Pattern.STEADY, 600, 36_000.0)
    bursts = arrivals(random.Random(1), Pattern.BURSTS, 600, 36_000.0)
    assert 0.8 < _gaps_cv(steady) < 1.2  # a Poisson process: exponential gaps
    assert _gaps_cv(bursts) > 2.0
    assert steady == sorted(steady)
    assert bursts == sorted(bursts)


def test_diurnal_arrivals_swing_with_the_day() -> None:
    times = arrivals(random.Random(2), Pattern.DIURNAL, 2000, 86_400.0)
    bins = [0] * 12
    for t in times:
        bins[min(11, int(t / 7200))] += 1
    assert max(bins) > 3 * min(bins)
    assert all(0 <= t <= 86_400 for t in times)


@pytest.mark.parametrize("pattern", list(Pattern), ids=lambda p: p.value)
def test_a_fixed_pattern_is_used(pattern: Pattern) -> None:
    made = generate(5, Size(jobs=30, gpu_nodes=4, cpu_nodes=1, pattern=pattern))
    assert made.pattern is pattern


def test_durations_are_heavy_tailed_like_the_trace() -> None:
    made = generate(11, Size(jobs=3000, gpu_nodes=8, cpu_nodes=2))
    durations = sorted(
        j.duration for j in made.workload.jobs if made.classes[j.name] is JobClass.ONE_GPU
    )
    assert all(d is not None for d in durations)
    cuts = statistics.quantiles([float(d or 0) for d in durations], n=100)
    p50, p99 = cuts[49], cuts[98]
    assert p99 > 8 * p50
    assert max(float(d or 0) for d in durations) <= DURATION_CAP


@settings(max_examples=15, deadline=None)
@given(seed=seeds, gpu_nodes=st.integers(min_value=1, max_value=6))
def test_cluster_shapes_are_valid_for_the_simulator(seed: int, gpu_nodes: int) -> None:
    size = Size(jobs=40, gpu_nodes=gpu_nodes, cpu_nodes=1)
    made = generate(seed, size)
    cluster = build_cluster(made.cluster)
    nodes = cluster.snapshot.nodes
    assert len(nodes) == gpu_nodes + 1
    assert never_fit(made.cluster, made.workload) == {}
    racks = [n.labels[RACK_LABEL] for n in nodes.values() if RACK_LABEL in n.labels]
    assert len(racks) == gpu_nodes
    assert max(racks.count(r) for r in racks) <= 2


def test_the_mig_group_counts_the_fixtures_whole_gpus() -> None:
    made = next(
        m
        for m in (generate(s, TINY) for s in range(40))
        if any(g.fixture == MIG_FIXTURE for g in m.cluster.groups)
    )
    group = next(g for g in made.cluster.groups if g.fixture == MIG_FIXTURE)
    inventory = load_fixture(MIG_FIXTURE).inventory
    whole = [g for g in inventory.gpus if g.mig_mode is not MigMode.ENABLED]
    assert group.gpus == len(whole)
    assert group.model == inventory.gpus[0].product


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_job_of_a_tiny_workload_is_placed(seed: int) -> None:
    made = generate(seed, TINY)
    run = run_events(made.cluster, made.workload, "gputopo", seed, shuffle_nodes=True)
    assert run.jobs_placed == run.jobs_total == TINY.jobs
    assert run.failed == {}


def test_the_offered_gpu_work_sets_the_horizon() -> None:
    light = generate(4, Size(jobs=200, gpu_nodes=6, cpu_nodes=1, load=0.5))
    heavy = generate(4, Size(jobs=200, gpu_nodes=6, cpu_nodes=1, load=2.0))
    assert light.horizon == pytest.approx(4 * heavy.horizon)
    assert light.workload.jobs[-1].arrival > heavy.workload.jobs[-1].arrival


@settings(max_examples=10, deadline=None)
@given(seed=seeds)
def test_the_day_before_has_the_cluster_and_mix_of_the_day_and_other_jobs(seed: int) -> None:
    today, before = generate(seed, TINY), generate(seed, TINY, day=-1)
    assert generate(seed, TINY, day=0) == today
    assert (before.cluster, before.mix, before.pattern) == (today.cluster, today.mix, today.pattern)
    assert before.workload.jobs != today.workload.jobs
    assert generate(seed, TINY, day=-2).workload.jobs != before.workload.jobs
    names = {j.name for j in today.workload.jobs}
    assert not names & {j.name for j in before.workload.jobs}  # no pod key of the day's
    assert all(j.name.endswith("@day-1") for j in before.workload.jobs)
    assert set(before.classes.values()) == set(today.classes.values())
