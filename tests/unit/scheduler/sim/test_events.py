"""`scheduler.sim.events`: arrivals, durations, gangs that wait for room and hold nothing."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.placement import CLIQUE_LABEL, PodRequest, TopologyConstraint
from scheduler.placement.fgd import PodShape
from scheduler.placement.fragscores import FragmentationScore
from scheduler.sim.build import build_cluster
from scheduler.sim.events import run_events
from scheduler.sim.policies import SimScheduler, make_policy
from scheduler.sim.report import runs_document
from scheduler.sim.workload import GIB, ClusterSpec, Job, NodeGroup, PodSpec, Workload

TWO_NODES = ClusterSpec(
    (NodeGroup(name="n", count=2, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),)
)


def job(
    name: str,
    arrival: float,
    gpus: int,
    replicas: int = 1,
    min_member: int = 1,
    duration: float | None = 100.0,
) -> Job:
    pod = PodSpec(cpu_milli=1000, gpus=gpus)
    return Job(
        name=name,
        pod=pod,
        replicas=replicas,
        min_member=min_member,
        arrival=arrival,
        duration=duration,
    )


def test_a_gang_waits_until_every_member_fits_then_starts_together():
    workload = Workload(
        (
            job("fill", 0.0, 4, replicas=2, duration=50.0),  # both nodes full until t=50
            job("gang", 10.0, 4, replicas=2, min_member=2, duration=10.0),
        )
    )
    result = run_events(TWO_NODES, workload, "gputopo", 1)
    assert result.jobs_placed == result.jobs_total == 2
    assert result.gang_wait_seconds == 40.0
    assert result.failed == {}
    assert result.peak_allocation == 100.0


def test_a_waiting_gang_holds_nothing_and_does_not_block_smaller_jobs():
    workload = Workload(
        (
            job("half", 0.0, 2, duration=100.0),
            job("gang", 1.0, 4, replicas=2, min_member=2, duration=10.0),  # needs both nodes
            job("small", 2.0, 1, duration=10.0),
        )
    )
    result = run_events(TWO_NODES, workload, "bestfit", 1)
    assert result.jobs_placed == 3
    assert result.gang_wait_seconds == 99.0  # placed when "half" ends at t=100


def test_jobs_that_never_fit_are_reported_by_pod_class():
    workload = Workload(
        (
            job("huge", 0.0, 8),
            Job(name="share", pod=PodSpec(gpu_milli=400), arrival=0.0, duration=5.0),
        )
    )
    result = run_events(TWO_NODES, workload, "fgd", 1)
    assert result.jobs_placed == 1
    assert result.failed == {"8-gpu": 1}
    assert result.pods_placed == 1


def test_time_weighted_allocation():
    # One 4-GPU pod on 8 GPUs for the whole span: 50% on average.
    workload = Workload((job("a", 0.0, 4, duration=100.0), job("b", 100.0, 0, duration=0.0)))
    result = run_events(TWO_NODES, workload, "spread", 1)
    assert result.mean_allocation == 50.0
    assert result.decisions_per_second > 0


ONE_DGX = ClusterSpec(
    (NodeGroup(name="d", count=1, gpus=8, model="H100", cpu_milli=64_000, memory=512 * GIB),)
)


def test_utilisation_is_time_weighted_over_the_arrival_window_only():
    # 4 of 8 GPUs for 50 s of a 100 s arrival window: 25 %; the long tail after it does not count.
    workload = Workload(
        (
            job("a", 0.0, 4, duration=50.0),
            job("b", 100.0, 0, duration=0.0),
            job("tail", 100.0, 4, replicas=2, duration=10_000.0),
        )
    )
    result = run_events(TWO_NODES, workload, "spread", 1)
    assert result.utilisation == 25.0
    assert result.mean_allocation is not None
    assert result.mean_allocation > 90.0


def test_waits_per_class_and_the_longest_8_gpu_wait():
    workload = Workload(
        (
            job("big", 0.0, 8, duration=100.0),
            job("eight", 10.0, 8, duration=100.0),  # starts at 100: waits 90
            job("one", 20.0, 1, replicas=2, duration=10.0),  # start at 200: wait 180 each
        )
    )
    result = run_events(ONE_DGX, workload, "gputopo", 1)
    eight, one = result.waits["8-gpu"], result.waits["1-gpu"]
    assert (eight.pods, eight.started, eight.p50, eight.p99, eight.longest) == (
        2,
        2,
        0.0,
        90.0,
        90.0,
    )
    assert (one.pods, one.started, one.p50, one.p99) == (2, 2, 180.0, 180.0)
    assert result.longest_8gpu_wait == 90.0
    assert list(result.waits) == ["1-gpu", "8-gpu", "all"]
    every = result.waits["all"]
    assert (every.pods, every.started, every.mean, every.p50, every.p99) == (4, 4, 112.5, 90, 180)
    figures = result.figures
    assert figures is not None
    assert figures.gpu_weighted_wait == 60.0  # (8 x 0 + 8 x 90 + 180 + 180) / 18 GPUs
    assert figures.mean_completion == 160.0  # big 100, eight 190, one 190
    assert figures.mean_slowdown == 7.3  # 100/100, 190/100, 190/10
    assert figures.makespan == 210.0  # the ones end at 210


def test_gang_pods_are_their_own_class_and_count_in_the_8_gpu_wait():
    workload = Workload(
        (
            job("fill", 0.0, 4, replicas=2, duration=50.0),
            job("gang", 10.0, 4, replicas=2, min_member=2, duration=10.0),
        )
    )
    result = run_events(TWO_NODES, workload, "gputopo", 1)
    gang = result.waits["gang"]
    assert (gang.pods, gang.started, gang.p99) == (2, 2, 40.0)
    assert result.longest_8gpu_wait is None  # 4-GPU members: no 8-GPU work here


def test_pods_never_placed_are_counted_and_left_out_of_the_waits():
    workload = Workload((job("huge", 0.0, 16), job("ok", 5.0, 1)))
    result = run_events(ONE_DGX, workload, "bestfit", 1)
    assert result.failed == {"other": 1}
    assert result.waits["other"].started == 0
    assert result.waits["other"].p99 is None


def test_the_timeline_samples_the_arrival_window_at_a_fixed_period():
    workload = Workload((job("a", 0.0, 4, duration=50.0), job("b", 100.0, 0, duration=0.0)))
    result = run_events(TWO_NODES, workload, "spread", 1)
    times = [s.time for s in result.timeline]
    assert len(times) == 101
    assert (times[0], times[49], times[50], times[-1]) == (0.0, 49.0, 50.0, 100.0)
    allocation = [s.allocation for s in result.timeline]
    assert (allocation[0], allocation[49], allocation[50]) == (50.0, 50.0, 0.0)
    fragmentation = [s.fragmentation for s in result.timeline]
    assert result.fragmentation_mean == round(sum(fragmentation) / len(fragmentation), 2)


TWO_CLIQUES = ClusterSpec(
    (
        NodeGroup(
            name="n",
            count=4,
            gpus=4,
            model="GB200",
            topology={CLIQUE_LABEL: "uuid.{index/2}"},
        ),
    )
)


def test_clique_figures_gangs_within_spanning_and_partly_used_cliques():
    """Cliques uuid.0 (n-0, n-1) and uuid.1 (n-2, n-3), 8 GPUs each. One 1-GPU pod runs from 0
    to 100; an 8-GPU gang arrives at 10 (ends 60) and must span both cliques under fgd, stays in
    the free clique under gputopo."""
    workload = Workload(
        (
            job("one", 0.0, 1, duration=100.0),
            job("gang", 10.0, 4, replicas=2, min_member=2, duration=50.0),
            job("end", 100.0, 1, duration=1.0),
        )
    )
    ours = run_events(TWO_CLIQUES, workload, "gputopo", 1)
    assert ours.domains == {
        # one clique partly used throughout; the gang fills the other whole
        CLIQUE_LABEL: {"gangsWithin": 1, "gangsSpanning": 0, "partlyUsedMean": 1.0}
    }
    assert ours.gang_wait_p99 == {8: 0.0}
    spread = run_events(TWO_CLIQUES, workload, "spread", 1)
    assert spread.domains[CLIQUE_LABEL]["gangsSpanning"] == 1
    # 10..60 both cliques partly used, else one: (10 + 2 * 50 + 40) / 100
    assert spread.domains[CLIQUE_LABEL]["partlyUsedMean"] == 1.5
    doc = runs_document([ours])["runs"][0]
    assert doc["domains"] == {CLIQUE_LABEL: dict(ours.domains[CLIQUE_LABEL])}
    assert doc["gangWaitP99Seconds"] == {"8": 0.0}


def test_a_required_clique_keeps_the_gang_waiting_until_one_clique_holds_it():
    """Spread puts one 1-GPU pod on each node until 30: each clique has 6 free GPUs, the cluster
    12. A gang of 4 × 2 GPUs spans the cliques at once, or with `required` waits until 30."""
    gang = job("gang", 10.0, 2, replicas=4, min_member=4, duration=10.0)
    for topology, wait, within in (
        (None, 0.0, 0),
        (TopologyConstraint(label=CLIQUE_LABEL), 20.0, 1),
    ):
        workload = Workload(
            (job("one", 0.0, 1, replicas=4, duration=30.0), replace(gang, topology=topology))
        )
        result = run_events(TWO_CLIQUES, workload, "spread", 1)
        assert result.gang_wait_seconds == wait
        assert result.domains[CLIQUE_LABEL]["gangsWithin"] == within
        assert result.domains[CLIQUE_LABEL]["gangsSpanning"] == 1 - within


def test_a_gangs_later_replicas_stay_in_its_required_clique():
    """A gang of 6 x 2 GPUs, minMember 2, in clique uuid.0 or uuid.1 (8 GPUs each): its first
    two start in one clique, two more fit there; the last two never start under `required`,
    though the other clique is empty (spread would put them there), and do without it."""
    gang = job("gang", 0.0, 2, replicas=6, min_member=2, duration=None)
    for topology, never in ((None, 0), (TopologyConstraint(label=CLIQUE_LABEL), 2)):
        result = run_events(TWO_CLIQUES, Workload((replace(gang, topology=topology),)), "spread", 1)
        assert sum(result.failed.values()) == never
        assert result.jobs_placed == (1 if never == 0 else 0)


def test_the_timeline_goes_on_to_the_last_departure_with_the_window_figures_unchanged():
    workload = Workload((job("a", 0.0, 4, duration=500.0), job("b", 100.0, 0, duration=0.0)))
    result = run_events(TWO_NODES, workload, "spread", 1)
    assert result.figures is not None
    window, tail = result.timeline[:101], result.timeline[101:]
    assert [s.time for s in window] == [float(t) for t in range(101)]
    assert (tail[-1].time, tail[-1].allocation) == (result.figures.makespan, 0.0) == (500.0, 0.0)
    assert len(tail) <= 101  # 400 s of tail at the window's 1 s period, thinned
    assert [s.time for s in tail[:3]] == [104.0, 108.0, 112.0]  # the period doubled twice
    assert {s.allocation for s in tail[:-1]} == {50.0}
    fragmentation = [s.fragmentation for s in window]
    assert result.fragmentation_mean == round(sum(fragmentation) / len(fragmentation), 2)


BIG_AND_SMALL = ClusterSpec(
    (
        NodeGroup(name="a", count=1, gpus=8, model="H100", cpu_milli=64_000, memory=512 * GIB),
        NodeGroup(name="b", count=1, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),
    )
)
ONE_THEN_EIGHT = Workload(
    (job("one", 0.0, 1, duration=1000.0), job("eight", 1.0, 8, duration=10.0))
)
ONES_ONLY = Workload(tuple(job(f"ran-{i}", 0.0, 1) for i in range(400)))


def test_what_the_policies_know_in_advance_is_the_history_when_there_is_one():
    """Knowing this workload (fgd's oracle) or the prior (gputopo), the 1-GPU pod goes to the
    4-GPU node and the 8-GPU pod starts at once; knowing a history of 1-GPU pods only, every
    node fragments alike for them, the pod goes to the first node and the 8-GPU pod waits."""
    for policy in ("fgd", "gputopo"):
        fresh = run_events(BIG_AND_SMALL, ONE_THEN_EIGHT, policy, 1)
        known = run_events(BIG_AND_SMALL, ONE_THEN_EIGHT, policy, 1, history=ONES_ONLY)
        assert fresh.longest_8gpu_wait == 0.0, policy
        assert known.longest_8gpu_wait == 999.0, policy
        assert known.jobs_placed == 2


def test_a_restart_forgets_what_the_learner_learned_unless_it_is_shown_the_running_pods():
    """Twenty 1-GPU pods run on a fresh cluster of 4-GPU nodes; the scheduler restarts. Shown
    the running pods its learner weighs 1 GPU as they do; not shown them, only its prior."""
    spec = ClusterSpec(
        (NodeGroup(name="n", count=6, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),)
    )
    ones = [PodRequest(key=f"one-{i}", cpu_milli=1000, gpus=1) for i in range(20)]
    waiting = PodRequest(key="waiting", gpus=8)
    weights = {}
    for relearn in (False, True):
        scheduler = SimScheduler(build_cluster(spec), make_policy("gputopo", ()), random.Random(1))
        for pod in ones:
            assert scheduler.place(pod) is not None
        old = scheduler.placer
        scheduler.restart(make_policy("gputopo", ()), ones if relearn else [], [waiting])
        assert scheduler.placer is not old
        learner = scheduler.policy.scoring.learners()[0]
        assert isinstance(learner, FragmentationScore)
        learner.observe(PodRequest(key="next", cpu_milli=1000))  # the refit, when due
        weights[relearn] = {t.shape: t.weight for t in learner.fragmentation.typical}
    one = PodShape(1000, 1000, 1)
    assert one not in weights[False]  # the prior alone
    assert weights[True][one] == pytest.approx(20 / 36)  # 20 pods and 16 of the prior


def test_a_scheduler_that_learns_nothing_decides_alike_after_a_restart():
    workload = Workload(tuple(job(f"j{i}", 10.0 * i, 1 + i % 4, duration=40.0) for i in range(12)))

    def figures(**kwargs: object) -> dict[str, object]:
        run = runs_document([run_events(TWO_NODES, workload, seed=1, **kwargs)])["runs"][0]
        return {k: v for k, v in run.items() if k != "decisionsPerSecond"}  # timed

    assert figures(policy_name="fgd", restart_at=35.0) == figures(policy_name="fgd")
    late = figures(policy_name="gputopo", restart_at=1e9)  # never reached
    assert late == figures(policy_name="gputopo")
