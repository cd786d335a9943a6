"""`scheduler.sim.replay`: the living-cluster replay of a trace pod list (DESIGN §8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim.replay import QOS_PRIORITY, living_replay, node_share, read_replay
from scheduler.sim.trace import TraceError, TracePod, parse_pod_list
from scheduler.sim.workload import ClusterSpec, NodeGroup


def pod(
    name: str,
    created: int | None,
    scheduled: int | None,
    deleted: int | None,
    *,
    gpus: int = 1,
    milli: int = 1000,
    qos: str = "LS",
) -> TracePod:
    return TracePod(
        name=name,
        cpu_milli=4000,
        memory_mib=1024,
        num_gpu=gpus,
        gpu_milli=milli,
        qos=qos,
        creation_time=created,
        scheduled_time=scheduled,
        deletion_time=deleted,
    )


def test_a_pod_arrives_at_creation_and_runs_from_scheduling_to_deletion():
    replay = living_replay([pod("a", 100, 130, 1130), pod("b", 200, 200, 250)], "t.csv")
    jobs = {j.name: j for j in replay.workload.jobs}
    assert (jobs["a"].arrival, jobs["a"].duration) == (0.0, 1000.0)  # the clock starts at 100
    assert (jobs["b"].arrival, jobs["b"].duration) == (100.0, 50.0)
    assert replay.start == 100


def test_a_pod_still_running_at_the_end_runs_to_the_traces_end():
    replay = living_replay([pod("run", 0, 10, None), pod("done", 5, 5, 900)], "t.csv")
    jobs = {j.name: j for j in replay.workload.jobs}
    assert replay.trace_end == 900
    assert jobs["run"].duration == 890.0


def test_pods_that_never_ran_are_left_out_and_counted():
    pods = [pod("ran", 0, 0, 10), pod("pending", 5, None, 60), pod("also", 7, None, None)]
    replay = living_replay(pods, "t.csv")
    assert [j.name for j in replay.workload.jobs] == ["ran"]
    assert (replay.pods_in_trace, replay.never_ran) == (3, 2)


@pytest.mark.parametrize(
    ("qos", "priority"),
    [
        pytest.param("LS", 3, id="LS"),
        pytest.param("Guaranteed", 2, id="Guaranteed"),
        pytest.param("Burstable", 1, id="Burstable"),
        pytest.param("BE", 0, id="BE"),
        pytest.param("", 0, id="no qos"),
    ],
)
def test_priority_comes_from_qos(qos: str, priority: int):
    (job,) = living_replay([pod("p", 0, 0, 1, qos=qos)], "t.csv").workload.jobs
    assert job.priority == priority
    assert QOS_PRIORITY.get(qos, 0) == priority


def test_load_divides_the_arrival_times_not_the_durations():
    pods = [pod("a", 0, 0, 500), pod("b", 1000, 1000, 1600)]
    replay = living_replay(pods, "t.csv", load=100)
    assert [(j.arrival, j.duration) for j in replay.workload.jobs] == [(0.0, 500.0), (10.0, 600.0)]
    assert replay.load == 100


def test_multi_gpu_pods_stay_single_pods_asking_all_their_gpus():
    (job,) = living_replay([pod("big", 0, 0, 10, gpus=8)], "t.csv").workload.jobs
    assert (job.replicas, job.pod.gpus, job.is_gang) == (1, 8, False)


def test_a_share_is_a_share_of_one_gpu():
    (job,) = living_replay([pod("s", 0, 0, 10, milli=470)], "t.csv").workload.jobs
    assert (job.pod.gpus, job.pod.gpu_milli) == (0, 470)


def test_files_without_time_columns_cannot_be_replayed(tmp_path: Path):
    path = tmp_path / "openb_pod_list_multigpu20.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,2,1000\n", "utf-8")
    with pytest.raises(TraceError, match=r"multigpu20\.csv: no creation/scheduled/deletion times"):
        read_replay(path)


def test_start_keeps_the_pods_running_then_with_what_they_had_left():
    pods = [pod("old", 0, 0, 50), pod("long", 10, 10, 400), pod("new", 300, 300, 310)]
    replay = living_replay(pods, "t.csv", start=100, load=2)
    jobs = {j.name: j for j in replay.workload.jobs}
    assert set(jobs) == {"long", "new"}
    assert replay.before_start == 1
    assert (jobs["long"].arrival, jobs["long"].duration) == (0.0, 300.0)
    assert (jobs["new"].arrival, jobs["new"].duration) == (100.0, 10.0)


def test_gang_window_groups_multi_gpu_pods_of_one_shape():
    pods = [
        pod("g-0", 0, 0, 100, gpus=4),
        pod("g-1", 30, 31, 200, gpus=4),
        pod("other-shape", 10, 10, 20, gpus=2),
        pod("late", 500, 500, 600, gpus=4),
    ]
    replay = living_replay(pods, "t.csv", gang_window=60)
    jobs = {j.name: j for j in replay.workload.jobs}
    assert set(jobs) == {"g-0", "other-shape", "late"}
    assert (jobs["g-0"].replicas, jobs["g-0"].min_member, jobs["g-0"].duration) == (2, 2, 169.0)
    assert replay.gangs == 1
    assert living_replay(pods, "t.csv").gangs == 0


def test_the_real_header_with_times_is_replayed():
    text = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
        "p0,1000,10,1,1000,,BE,Running,0,90,10\n"
        "p1,1000,10,1,1000,,LS,Pending,5,60,\n"
    )
    replay = living_replay(parse_pod_list(text), "t.csv")
    assert [(j.name, j.duration, j.priority) for j in replay.workload.jobs] == [("p0", 80.0, 0)]
    assert replay.never_ran == 1


def test_node_share_keeps_each_kind_in_proportion():
    groups = [NodeGroup(name=f"a{i}", gpus=8, model="G2", keep_name=True) for i in range(4)]
    groups += [NodeGroup(name=f"t{i}", gpus=2, model="T4", keep_name=True) for i in range(2)]
    half = node_share(ClusterSpec(tuple(groups)), 0.5)
    assert [g.name for g in half.groups] == ["a1", "a3", "t1"]
    assert half.gpu_count == 18
    with pytest.raises(ValueError, match="node share"):
        node_share(ClusterSpec(tuple(groups)), 0)
