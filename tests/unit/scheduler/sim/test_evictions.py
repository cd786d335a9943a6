"""Event mode with preemption and reclaim (`scheduler.sim.evictions`, DESIGN §11): the runtime's
victim search on the simulated cluster; no gang cut, no eviction in vain."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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
    without = run_events(TWO_NODES, workload, "bestfit", 1)
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
