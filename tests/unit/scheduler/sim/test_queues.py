"""Event mode with queues (`scheduler.sim.events` + `queues`): max holds at every level, borrowing,
order, best-effort FIFO, and the per-queue figures."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.quota import read_queue
from scheduler.sim.events import run_events
from scheduler.sim.queues import QueueReport, percentile
from scheduler.sim.workload import GIB, ClusterSpec, Job, NodeGroup, PodSpec, Workload

TWO_NODES = ClusterSpec(
    (NodeGroup(name="n", count=2, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),)
)
GPU = "nvidia.com/gpu"


def queue(name: str, parent: str | None = None, low: int | None = None, high: int | None = None):
    spec: dict[str, object] = {"parent": parent}
    if low is not None:
        spec["min"] = {GPU: low}
    if high is not None:
        spec["max"] = {GPU: high}
    return read_queue({"metadata": {"name": name}, "spec": spec})


def job(name: str, leaf: str | None, gpus: int = 1, **kw: object) -> Job:
    fields: dict[str, object] = {"arrival": 0.0, "duration": 100.0, **kw}
    return Job(name=name, pod=PodSpec(cpu_milli=1000, gpus=gpus), queue=leaf, **fields)  # type: ignore[arg-type]


def by_name(reports: tuple[QueueReport, ...]) -> dict[str, QueueReport]:
    return {r.name: r for r in reports}


def test_a_hard_quota_never_exceeds_max_and_its_work_waits():
    queues = (queue("a", low=4, high=4), queue("b", low=4))
    jobs = tuple(job(f"a{i}", "a") for i in range(8))
    result = run_events(TWO_NODES, Workload(jobs, queues=queues), "bestfit", 1, preemption=False)
    a = by_name(result.queues)["a"]
    assert a.peak_gpus == 4.0
    assert (a.pods_started, a.wait_p50, a.wait_p99) == (8, 0.0, 100.0)
    assert result.peak_allocation == 50.0  # the idle half stays idle


def test_borrowing_uses_idle_gpus_and_hard_does_not():
    jobs = tuple(job(f"a{i}", "a") for i in range(8))
    borrow = Workload(jobs, queues=(queue("a", low=4), queue("b", low=4)))
    hard = Workload(jobs, queues=(queue("a", low=4, high=4), queue("b", low=4, high=4)))
    lent = by_name(run_events(TWO_NODES, borrow, "bestfit", 1, preemption=False).queues)["a"]
    capped = by_name(run_events(TWO_NODES, hard, "bestfit", 1, preemption=False).queues)["a"]
    assert (lent.peak_gpus, lent.wait_p99) == (8.0, 0.0)
    assert (capped.peak_gpus, capped.wait_p99) == (4.0, 100.0)


def test_a_parent_max_caps_its_children_together():
    queues = (queue("org", high=5), queue("x", parent="org"), queue("y", parent="org"))
    jobs = tuple(job(f"{leaf}{i}", leaf) for leaf in "xy" for i in range(4))
    reports = by_name(
        run_events(TWO_NODES, Workload(jobs, queues=queues), "bestfit", 1, preemption=False).queues
    )
    assert reports["org"].peak_gpus == 5.0
    assert reports["x"].peak_gpus + reports["y"].peak_gpus >= 5.0
    assert reports["org"].gpu_seconds == reports["x"].gpu_seconds + reports["y"].gpu_seconds


def test_the_queue_furthest_below_its_min_goes_first():
    # At t=1 both want 6 GPUs of the 6 free; a holds 2 of its min 4, b 0 of 4: b goes first,
    # then they alternate (2/4 each, a by name), then b's last unit is within guarantee: b gets
    # 2 of its 3 units at once (by name alone a would have).
    queues = (queue("a", low=4), queue("b", low=4))
    early = (job("a-early", "a", gpus=2, arrival=0.0, duration=1000.0),)
    late = tuple(job(f"{leaf}{i}", leaf, gpus=2, arrival=1.0) for leaf in "ab" for i in range(3))
    reports = by_name(
        run_events(
            TWO_NODES, Workload(early + late, queues=queues), "bestfit", 1, preemption=False
        ).queues
    )
    assert reports["b"].wait_p50 == 0.0
    assert reports["b"].wait_p99 == 100.0
    assert reports["a"].peak_gpus == 6.0  # at t=101, with b's work done, a borrows


def test_a_unit_over_quota_does_not_block_the_ones_behind_it():
    queues = (queue("a", high=4),)
    jobs = (
        job("gang", "a", gpus=4, replicas=2, min_member=2),  # 8 GPUs > max 4: never admitted
        job("small", "a", gpus=1, arrival=1.0),
    )
    result = run_events(TWO_NODES, Workload(jobs, queues=queues), "bestfit", 1, preemption=False)
    a = by_name(result.queues)["a"]
    assert (a.pods, a.pods_started, a.wait_p50) == (3, 1, 0.0)
    assert result.failed == {"4-gpu": 2}


def test_priority_goes_first_inside_a_queue():
    queues = (queue("a", high=1),)
    jobs = (
        job("low", "a", arrival=0.0, duration=10.0),
        job("later-low", "a", arrival=1.0),
        job("later-high", "a", arrival=2.0, priority=5, duration=10.0),
    )
    result = run_events(TWO_NODES, Workload(jobs, queues=queues), "bestfit", 1, preemption=False)
    a = by_name(result.queues)["a"]
    assert (a.wait_p50, a.wait_p99) == (8.0, 19.0)  # later-high starts at 10, later-low at 20


def test_gpu_time_is_each_pods_gpus_times_its_runtime():
    queues = (queue("a", low=2), queue("b"))
    jobs = (
        job("a1", "a", gpus=2, duration=30.0),
        job("a2", "a", gpus=1, arrival=5.0, duration=10.0),
        job("b1", "b", gpus=4, replicas=2, min_member=2, arrival=1.0, duration=7.0),
        Job(name="s", pod=PodSpec(gpu_milli=250), queue="b", duration=40.0),
    )
    result = run_events(TWO_NODES, Workload(jobs, queues=queues), "bestfit", 1, preemption=False)
    reports = by_name(result.queues)
    assert reports["a"].gpu_seconds == 2 * 30 + 1 * 10
    assert reports["b"].gpu_seconds == 2 * 4 * 7 + 0.25 * 40
    assert set(reports) == {"a", "b"}  # `default` is left out when no job used it


def test_guarantee_deficit_accrues_while_owed_work_waits_below_min():
    # b (min 4) arrives at t=10 to a cluster a fills by borrowing until t=100: b waits 90 s
    # below its min with 4 GPUs of owed work pending: 4 × 90 GPU-seconds.
    queues = (queue("a", low=4), queue("b", low=4))
    jobs = (
        *(job(f"a{i}", "a", gpus=4) for i in range(2)),
        job("b", "b", gpus=4, arrival=10.0, duration=10.0),
    )
    result = run_events(TWO_NODES, Workload(jobs, queues=queues), "bestfit", 1, preemption=False)
    reports = by_name(result.queues)
    assert reports["b"].deficit_gpu_seconds == 360.0
    assert reports["a"].deficit_gpu_seconds == 0.0
    hard = tuple(replace(q, max=q.min) for q in queues)
    capped = by_name(
        run_events(TWO_NODES, Workload(jobs, queues=hard), "bestfit", 1, preemption=False).queues
    )
    assert capped["b"].deficit_gpu_seconds == 0.0


def test_without_queues_there_is_no_queue_report_and_one_unlimited_queue_changes_nothing():
    jobs = (
        job("fill", None, gpus=4, replicas=2, duration=50.0),
        job("gang", None, gpus=4, replicas=2, min_member=2, arrival=10.0, duration=10.0),
        job("small", None, arrival=12.0, duration=5.0),
    )
    plain = run_events(TWO_NODES, Workload(jobs), "gputopo", 1, preemption=False)
    queued = Workload(tuple(replace(j, queue="all") for j in jobs), queues=(queue("all"),))
    one = run_events(TWO_NODES, queued, "gputopo", 1, preemption=False)
    assert plain.queues == ()
    assert (plain.gang_wait_seconds, plain.mean_allocation, plain.jobs_placed) == (40.0, 93.27, 3)
    keep = ("gang_wait_seconds", "mean_allocation", "peak_allocation", "allocation", "failed")
    assert [getattr(one, k) for k in keep] == [getattr(plain, k) for k in keep]


def test_percentile_is_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


@st.composite
def trees_and_jobs(draw: st.DrawFn) -> Workload:
    parents = draw(st.integers(1, 3))
    specs, leaves = [], []
    for p in range(parents):
        high = draw(st.none() | st.integers(0, 8))
        specs.append(queue(f"p{p}", high=high))
        for k in range(draw(st.integers(1, 3))):
            leaf_max = draw(st.none() | st.integers(0, 8))
            low = draw(st.integers(0, min(leaf_max if leaf_max is not None else 4, 4)))
            specs.append(queue(f"p{p}l{k}", parent=f"p{p}", low=low, high=leaf_max))
            leaves.append(f"p{p}l{k}")
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        replicas = draw(st.integers(1, 3))
        jobs.append(
            job(
                f"j{i}",
                draw(st.sampled_from(leaves)),
                gpus=draw(st.integers(1, 4)),
                replicas=replicas,
                min_member=draw(st.sampled_from((1, replicas))),
                arrival=float(draw(st.integers(0, 40))),
                duration=float(draw(st.integers(1, 30))),
            )
        )
    return Workload(tuple(jobs), queues=tuple(specs))


@settings(max_examples=60, deadline=None)
@given(trees_and_jobs())
def test_no_queue_ever_exceeds_its_max_at_any_level(workload: Workload):
    result = run_events(TWO_NODES, workload, "bestfit", 1, preemption=False)
    limits = {q.name: q.max.get(GPU) for q in workload.queues}
    for report in result.queues:
        limit = limits.get(report.name)
        assert limit is None or report.peak_gpus * 1000 <= limit, report
    again = run_events(TWO_NODES, workload, "bestfit", 1, preemption=False)
    assert again.queues == result.queues  # deterministic
