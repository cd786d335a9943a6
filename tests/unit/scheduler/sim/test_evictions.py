"""Event mode with preemption and reclaim (`scheduler.sim.evictions`, DESIGN §11): the runtime's
victim search on the simulated cluster; no gang cut, no eviction in vain."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement import TopologyConstraint
from scheduler.preemption import PreemptionSettings
from scheduler.quota import read_queue
from scheduler.sim.events import run_events
from scheduler.sim.report import format_table, runs_document
from scheduler.sim.workload import GIB, ClusterSpec, Job, NodeGroup, PodSpec, Workload

TWO_NODES = ClusterSpec(
    (NodeGroup(name="n", count=2, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),)
)
GPU = "nvidia.com/gpu"
ON = PreemptionSettings()


def queue(name: str, low: int) -> object:
    return read_queue({"metadata": {"name": name}, "spec": {"min": {GPU: low}}})


def job(name: str, leaf: str | None = None, gpus: int = 1, **kw: object) -> Job:
    fields: dict[str, object] = {"arrival": 0.0, "duration": 1000.0, **kw}
    return Job(name=name, pod=PodSpec(cpu_milli=1000, gpus=gpus), queue=leaf, **fields)  # type: ignore[arg-type]


def test_a_guaranteed_queue_reclaims_what_another_borrowed() -> None:
    jobs = (*(job(f"b{i}", "b") for i in range(8)), job("a", "a", gpus=4, arrival=10.0))
    workload = Workload(jobs, queues=(queue("a", 4), queue("b", 4)))  # type: ignore[arg-type]
    without = run_events(TWO_NODES, workload, "bestfit", 1, preemption=False)
    result = run_events(TWO_NODES, workload, "bestfit", 1, preemption=ON)
    assert without.preemption is None
    assert result.preemption is not None
    assert (result.preemption.preemptions, result.preemption.pods_evicted) == (1, 4)
    assert result.preemption.by_reason == {"reclaim": 4}
    assert result.preemption.gpu_seconds_lost == 4 * 10.0
    assert (result.preemption.partial_gangs, result.preemption.wasted) == (0, 0)
    a = {q.name: q for q in result.queues}["a"]
    assert a.wait_p99 == 0.0
    assert {q.name: q for q in without.queues}["a"].wait_p99 == 990.0
    assert result.pods_placed == result.pods_arrived  # the evicted pods ran again later
    assert "evictions without start" in format_table([result])
    assert runs_document([result])["runs"][0]["preemption"]["podsEvicted"] == 4


def test_a_higher_priority_pod_evicts_a_whole_gang() -> None:
    gang = job("g", gpus=4, replicas=2, min_member=2)
    urgent = job("u", gpus=4, arrival=5.0, priority=10)
    result = run_events(TWO_NODES, Workload((gang, urgent)), "bestfit", 1, preemption=ON)
    assert result.preemption is not None
    assert result.preemption.pods_evicted == 2
    assert result.preemption.partial_gangs == 0
    assert result.longest_8gpu_wait is None
    assert result.jobs_placed == 2


def test_spare_members_go_first() -> None:
    gang = job("g", gpus=4, replicas=2, min_member=1)  # one replica above minMember
    urgent = job("u", gpus=4, arrival=5.0, priority=10)
    result = run_events(TWO_NODES, Workload((gang, urgent)), "bestfit", 1, preemption=ON)
    assert result.preemption is not None
    assert result.preemption.pods_evicted == 1


@settings(max_examples=25, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from([1, 2, 4]),  # GPUs per pod
            st.integers(1, 3),  # replicas
            st.booleans(),  # a gang
            st.integers(0, 3),  # priority
            st.integers(0, 50),  # arrival
            st.sampled_from(["a", "b"]),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_no_gang_is_cut_and_no_eviction_is_in_vain(specs: list) -> None:  # type: ignore[type-arg]
    jobs = tuple(
        job(
            f"j{i}",
            leaf,
            gpus,
            replicas=n,
            min_member=n if gang and gpus * n <= 8 else 1,  # every gang fits the 8 GPUs
            priority=p,
            arrival=float(t),
            duration=100.0,
        )
        for i, (gpus, n, gang, p, t, leaf) in enumerate(specs)
    )
    workload = Workload(jobs, queues=(queue("a", 4), queue("b", 2)))  # type: ignore[arg-type]
    result = run_events(TWO_NODES, workload, "gputopo", 1, preemption=ON)
    assert result.preemption is not None
    assert result.preemption.partial_gangs == 0
    assert result.preemption.wasted == 0
    assert result.pods_placed == result.pods_arrived


def test_no_eviction_for_a_unit_whose_nodes_are_held_for_another() -> None:
    """Found by the property above: gang j8 (queue a, priority 1) searched victims on nodes a
    starvation hold keeps for gang j7 (queue b, same priority) and evicted two pods there, then
    could not start (placement kept it off the held nodes). The search now keeps U off the
    nodes placement does: it evicts only where U may start."""
    specs = [(1, 1, False, 0, 0, "a")] * 6 + [
        (2, 3, False, 1, 1, "a"),
        (2, 3, True, 1, 0, "b"),
        (2, 3, True, 1, 1, "a"),
        (4, 3, False, 0, 0, "b"),
    ]
    jobs = tuple(
        job(f"j{i}", leaf, gpus, replicas=n, min_member=n if gang else 1, priority=p,
            arrival=float(t), duration=100.0)
        for i, (gpus, n, gang, p, t, leaf) in enumerate(specs)
    )  # fmt: skip
    workload = Workload(jobs, queues=(queue("a", 4), queue("b", 2)))  # type: ignore[arg-type]
    result = run_events(TWO_NODES, workload, "gputopo", 1, preemption=ON)
    assert result.preemption is not None
    assert result.preemption.holds == 1  # the hold is there
    assert result.preemption.wasted == 0
    assert result.pods_placed == result.pods_arrived


ONE_NODE = ClusterSpec(
    (NodeGroup(name="n", count=1, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),)
)


def _starving_workload() -> Workload:
    """A 4-GPU pod behind a stream of 1-GPU pairs that always leaves it 2 GPUs short."""
    big = job("big", gpus=4, arrival=10.0, duration=100.0)
    pairs = [
        job(f"s{t:04d}", replicas=2, arrival=float(t), duration=400.0) for t in range(0, 2001, 100)
    ]
    return Workload((big, *pairs))


def test_the_starvation_guard_holds_the_node_for_a_unit_waiting_past_starvation_seconds():
    """At t=400 "big" has waited 390 s (> 300): it gets a hold on the node, the pair arriving
    then may not take the 2 GPUs freed, and "big" starts when the next pair ends (t=500)."""
    guarded = run_events(ONE_NODE, _starving_workload(), "bestfit", 1)
    plain = run_events(ONE_NODE, _starving_workload(), "bestfit", 1, preemption=False)
    assert guarded.waits["4-gpu"].longest == 490.0
    assert guarded.preemption is not None
    assert guarded.preemption.pods_evicted == 0  # a hold evicts nobody
    assert guarded.preemption.holds >= 1  # (pairs that wait behind it starve in turn)
    assert guarded.preemption.held_gpu_seconds >= 400.0  # 4 GPUs held from 400 to 500
    assert plain.preemption is None
    longest = plain.waits["4-gpu"].longest
    assert longest is not None
    assert longest > 2000.0


def test_an_evicted_pod_runs_again_and_its_wait_counts_from_its_first_arrival():
    low = job("low", gpus=4, duration=1000.0)
    high = job("high", gpus=4, arrival=100.0, duration=100.0, priority=10)
    result = run_events(ONE_NODE, Workload((low, high)), "bestfit", 1)
    assert result.preemption is not None
    assert result.preemption.pods_evicted == 1
    assert result.preemption.gpu_seconds_lost == 400.0  # 4 GPUs x 100 s
    waits = result.waits["4-gpu"]
    assert (waits.started, waits.p50, waits.longest) == (2, 0.0, 200.0)  # low restarts at 200
    figures = result.figures
    assert figures is not None
    assert figures.mean_completion == 650.0  # high 100, low 1,200
    assert figures.makespan == 1200.0
    doc = runs_document([result])["runs"][0]["preemption"]
    assert (doc["holds"], doc["evictions"], doc["heldGpuSeconds"]) == (0, 1, 0.0)


def _slow_drain_workload() -> Workload:
    """The node's four GPUs run pods ending at 700, 900, 1100 and 1300 s; a 4-GPU pod arrives at
    10 s, and 1-GPU pods queued behind it arrive every 50 s, each running long."""
    running = [job(f"r{end}", arrival=0.0, duration=float(end)) for end in (700, 900, 1100, 1300)]
    big = job("big", gpus=4, arrival=10.0, duration=100.0)
    stream = [job(f"s{t:04d}", arrival=float(t), duration=1300.0) for t in range(20, 3001, 50)]
    return Workload((*running, big, *stream))


def test_a_hold_whose_nodes_drain_is_renewed_on_them_until_the_unit_starts() -> None:
    """ "big" holds the node from 310 s; when the hold runs out (911 s) two of its GPUs are free
    and it renews the hold on that node at once, so it starts as the last pod ends (1,300 s). A
    hold that ran out and waited a cooldown before the next one gave the freed GPUs to the
    1-GPU pods behind it, which kept the node full for thousands of seconds."""
    result = run_events(ONE_NODE, _slow_drain_workload(), "bestfit", 1)
    assert result.waits["4-gpu"].longest == 1290.0
    assert result.preemption is not None
    assert result.preemption.pods_evicted == 0


RACKS = ClusterSpec(
    (
        NodeGroup(
            name="n",
            count=4,
            gpus=4,
            model="H100",
            cpu_milli=64_000,
            memory=512 * GIB,
            topology={"gputopo.io/rack": "rack-{index/2}"},
        ),
    )
)


def test_a_gang_held_to_one_rack_takes_its_victims_in_one_rack() -> None:
    """The search knows the gang's topology, as the runtime's does: the cheapest victims (the
    priority-0 pods on n-0 and n-2) are in two racks, so it takes a rack's two nodes instead,
    and the gang starts at once; no eviction is in vain."""
    fills = [(0, 0), (1, 1), (2, 0), (3, 1)]  # (arrival, priority): bestfit fills n-0 .. n-3
    pods = [job(f"p{t}-{i}", priority=p, arrival=float(t)) for t, p in fills for i in range(4)]
    rack = TopologyConstraint(label="gputopo.io/rack", required=True)
    gang = job("g", gpus=4, replicas=2, min_member=2, arrival=10.0, priority=10, topology=rack)
    result = run_events(RACKS, Workload((*pods, gang)), "bestfit", 1, preemption=ON)
    assert result.preemption is not None
    assert (result.preemption.preemptions, result.preemption.wasted) == (1, 0)
    assert result.preemption.pods_evicted == 8
    assert result.gang_wait_seconds == 0.0  # started at its arrival, in one rack
    assert result.pods_placed == result.pods_arrived  # the evicted pods ran again later
