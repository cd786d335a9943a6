"""`scheduler.sim.plot`: what an event-mode plot draws, without drawing it."""

from __future__ import annotations

from scheduler.sim.events import run_events
from scheduler.sim.plot import last_arrival_hours, mean_timeline, timeline_axis
from scheduler.sim.workload import ClusterSpec, Job, NodeGroup, PodSpec, Workload

NODES = ClusterSpec((NodeGroup(name="n", count=2, gpus=4, model="H100"),))


def _job(name: str, arrival: float, gpus: int, duration: float) -> Job:
    pod = PodSpec(cpu_milli=1000, gpus=gpus)
    return Job(name=name, pod=pod, replicas=1, min_member=1, arrival=arrival, duration=duration)


def test_the_time_axis_and_the_curves_reach_the_makespan_not_just_the_last_arrival():
    # arrivals over 2 h, the last pod leaves at 6 h: the plot spans 6 h
    workload = Workload(
        (_job("long", 0.0, 4, duration=6 * 3600.0), _job("last", 2 * 3600.0, 1, duration=60.0))
    )
    runs = [run_events(NODES, workload, "gputopo", seed) for seed in (1, 2)]
    makespan_h = max(r.figures.makespan for r in runs if r.figures) / 3600
    assert makespan_h == 6.0
    assert timeline_axis(runs) == (0.0, 6.0)
    hours, alloc, _frag = mean_timeline(runs)
    assert (hours[0], hours[-1]) == (0.0, 6.0)
    assert (alloc[0], alloc[-1]) == (50.0, 0.0)  # 4 of 8 GPUs, then nothing left running
    assert last_arrival_hours(runs) == 2.0
