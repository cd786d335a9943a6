"""Claim-style pods in the simulator: read from the workload, placed by the claims code."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.model import NvlinkFabric
from scheduler.claims.model import ResourceClaim
from scheduler.placement import Assignment, NodeState, PodRequest, TopologyConstraint
from scheduler.preemption import PreemptionSettings
from scheduler.sim.build import build_cluster, job_requests
from scheduler.sim.claims import SimClaims, claim_node
from scheduler.sim.cluster import make_links
from scheduler.sim.events import run_events
from scheduler.sim.policies import SimScheduler, make_policy
from scheduler.sim.workload import GIB, ClusterSpec, NodeGroup, Workload, load_workload
from scheduler.sim.yamlread import WorkloadError
from tests.builders.claims import claim, request

ON = PreemptionSettings()
ONE_NODE = ClusterSpec(
    (NodeGroup(name="n", count=1, gpus=8, model="H100", cpu_milli=64_000, memory=512 * GIB),)
)


def claim_yaml(count: int, selector: str | None = None, extra: str = "") -> str:
    sel = f", selectors: [{{cel: {{expression: '{selector}'}}}}]" if selector else ""
    return (
        f"    pod: {{cpu: 1, claims: [{{devices: {{requests: [{{name: g, exactly: "
        f"{{deviceClassName: gpu.gputopo.io, count: {count}{sel}}}}}]}}}}]}}\n{extra}"
    )


def workload(tmp_path: Path, *jobs: str) -> Path:
    text = "version: v1\njobs:\n" + "".join(jobs)
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return path


def test_claims_are_read_and_counted_as_gpus(tmp_path: Path) -> None:
    path = workload(tmp_path, "  - name: a\n    replicas: 2\n" + claim_yaml(2))
    job = load_workload(str(path)).jobs[0]
    assert job.pod.gpus == 2
    assert job.pod.pod_class == "claims"
    assert job.pod.claims[0].spec.requests[0].alternatives[0].count == 2


@pytest.mark.parametrize(
    ("job", "match"),
    [
        pytest.param(
            "  - name: b\n    pod: {claims: [{devices: {requests: [{name: g}]}}]}\n",
            r"jobs\[0\].pod.claims\[0\]: spec.devices.requests\[0\].exactly",
            id="malformed claim",
        ),
        pytest.param(
            "  - name: c\n    pod: {gpus: 1, claims: [{devices: {requests: []}}]}\n",
            "exclusive",
            id="gpus and claims",
        ),
    ],
)
def test_bad_claims_are_refused_with_their_path(tmp_path: Path, job: str, match: str) -> None:
    with pytest.raises(WorkloadError, match=match):
        load_workload(str(workload(tmp_path, job)))


def test_claim_pods_and_plain_pods_share_the_gpus_without_overlap(tmp_path: Path) -> None:
    path = workload(
        tmp_path,
        "  - name: a-plain\n    pod: {cpu: 1, gpus: 4}\n",
        "  - name: b-dra\n    replicas: 3\n" + claim_yaml(2),
        "  - name: c-never\n" + claim_yaml(1, 'device.attributes["gpu.gputopo.io"].numaNode == 9'),
    )
    result = run_events(ONE_NODE, load_workload(str(path)), "gputopo", 1)
    assert result.pods_placed == 3  # plain (4) + two dra pods (2 + 2): the node's 8 GPUs
    assert result.failed == {"claims": 2}
    assert result.peak_allocation == 100.0


def test_devices_carry_nvlink_islands_from_the_links() -> None:
    node = NodeState(
        name="n1",
        gpu_numa=(0, 0, 1, 1),
        links=make_links(4, NvlinkFabric.DIRECT, 2),
        labels={"nvidia.com/gpu.product": "A100"},
    )
    published = claim_node(node)
    islands = [d.attributes["gpu.gputopo.io/nvlinkIsland"] for d in published.devices.devices]
    assert islands == [0, 0, 2, 2]
    assert published.gpus is not None
    assert published.gpus.whole[published.devices.devices[3].id] == 3


RACK = "gputopo.io/rack"
RACKED = NodeGroup(name="n", count=2, gpus=8, model="H100", topology={RACK: "rack-{index}"})
TWO_RACKS = ClusterSpec((RACKED,))


def gang_yaml(name: str, replicas: int, count: int, cpu: int = 1, topology: str = "") -> str:
    job = f"  - name: {name}\n    replicas: {replicas}\n    minMember: {replicas}\n{topology}"
    return job + claim_yaml(count).replace("{cpu: 1,", f"{{cpu: {cpu},")


def gang_scheduler(spec: ClusterSpec, path: Path) -> tuple[SimScheduler, Workload]:
    loaded = load_workload(str(path))
    scheduler = SimScheduler(build_cluster(spec), make_policy("gputopo", []), random.Random(1))
    for job in loaded.jobs:
        scheduler.claims.update((r.key, job.pod.claims) for r in job_requests(job))
    return scheduler, loaded


GANGS = [  # (replicas, GPUs each, pods placed) on one node of 8 GPUs
    pytest.param(4, 2, 4, id="4 pods x 2 GPUs fill the node"),
    pytest.param(2, 4, 2, id="2 pods x 4 GPUs"),
    pytest.param(5, 2, 0, id="5 pods x 2 GPUs: none"),
    pytest.param(3, 3, 0, id="3 pods x 3 GPUs: none"),
]


@pytest.mark.parametrize(("replicas", "count", "placed"), GANGS)
def test_a_claim_gang_is_placed_all_or_none(
    tmp_path: Path, replicas: int, count: int, placed: int
) -> None:
    path = workload(tmp_path, gang_yaml("g", replicas, count))
    result = run_events(ONE_NODE, load_workload(str(path)), "gputopo", 1)
    assert result.pods_placed == placed
    assert result.jobs_placed == (1 if placed else 0)


def test_gang_members_get_their_own_gpus_and_nothing_is_bound(tmp_path: Path) -> None:
    scheduler, loaded = gang_scheduler(ONE_NODE, workload(tmp_path, gang_yaml("g", 4, 2)))
    pods = job_requests(loaded.jobs[0])
    got = scheduler.choose_gang(pods, None)
    assert got.ok
    gpus = [g for p in pods for g in got.assignments[p.key].gpus]
    assert sorted(gpus) == list(range(8))
    assert all(len(got.assignments[p.key].gpus) == 2 for p in pods)
    nothing_bound = scheduler.placer.snapshot.node(got.assignments[pods[0].key].node)
    assert not nothing_bound.pods


@pytest.mark.parametrize(
    ("topology", "placed"),
    [
        pytest.param(f"    topology: {{required: {RACK}}}\n", False, id="required rack: none"),
        pytest.param(f"    topology: {{preferred: {RACK}}}\n", True, id="preferred: both racks"),
        pytest.param("", True, id="no topology"),
    ],
)
def test_a_claim_gang_keeps_to_its_topology_domain(
    tmp_path: Path, topology: str, placed: bool
) -> None:
    """3 pods x 4 GPUs: 12 GPUs, more than one rack's 8."""
    scheduler, loaded = gang_scheduler(
        TWO_RACKS, workload(tmp_path, gang_yaml("g", 3, 4, 1, topology))
    )
    job = loaded.jobs[0]
    got = scheduler.choose_gang(job_requests(job), job.topology)
    assert got.ok is placed
    if placed:
        assert {a.node for a in got.assignments.values()} == {"n-0", "n-1"}
    else:
        assert got.reason


def test_a_claim_gang_in_one_rack_when_it_fits_there(tmp_path: Path) -> None:
    scheduler, loaded = gang_scheduler(
        TWO_RACKS,
        workload(tmp_path, gang_yaml("g", 2, 4, 1, f"    topology: {{required: {RACK}}}\n")),
    )
    job = loaded.jobs[0]
    assert job.topology == TopologyConstraint(label=RACK, required=True)
    got = scheduler.choose_gang(job_requests(job), job.topology)
    assert got.ok
    assert len({a.node for a in got.assignments.values()}) == 1


def test_a_claim_gang_whose_members_cpu_does_not_fit_together_is_not_placed(
    tmp_path: Path,
) -> None:
    """Two members of 40 cpus and 4 GPUs each: the GPUs fit on the node, the cpus do not."""
    scheduler, loaded = gang_scheduler(ONE_NODE, workload(tmp_path, gang_yaml("g", 2, 4, cpu=40)))
    got = scheduler.choose_gang(job_requests(loaded.jobs[0]), None)
    assert not got.ok
    assert "no room" in got.reason
    assert not scheduler.placer.snapshot.node("n-0").pods


Member = tuple[PodRequest, tuple[ResourceClaim, ...]]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["pod", "gang", "cpu", "forget", "swap"]), st.sampled_from([1, 2, 4, 8])
        ),
        min_size=1,
        max_size=24,
    )
)
def test_kept_verdicts_decide_as_a_fresh_allocator_does(steps: list[tuple[str, int]]) -> None:
    """One `SimClaims` for the run (its verdicts, node lists and usage kept, the snapshot its
    nodes' change log) against a fresh one at every step, while pods and gangs of claims, and
    pods of no GPUs, are bound and taken away, and a node's state is replaced by a copy (a new
    object, the pods bound after on it)."""
    spec = ClusterSpec(
        (NodeGroup(name="n", count=3, gpus=8, model="H100", topology=RACKED.topology),)
    )
    scheduler = SimScheduler(build_cluster(spec), make_policy("gputopo", []), random.Random(1))
    snapshot, kept = scheduler.placer.snapshot, SimClaims(scheduler.placer)
    bound: list[str] = []
    for i, (kind, count) in enumerate(steps):
        if kind == "forget":
            if bound:
                snapshot.forget(bound.pop(count % len(bound)))
            continue
        if kind == "swap":
            snapshot.add_node(snapshot.node(f"n-{count % 3}").clone())
            continue
        if kind == "cpu":  # a pod of no GPUs: the node's state changes, not its GPUs
            cpu_only = PodRequest(key=f"sim/cpu{i}", cpu_milli=count * 6_000)
            snapshot.assume(cpu_only, Assignment(node=f"n-{i % 3}", gpus=()))
            bound.append(cpu_only.key)
            continue
        members: list[Member] = [
            (
                PodRequest(key=f"sim/p{i}-{m}", cpu_milli=1000, gpus=count),
                (claim("c", request("g", count)),),
            )
            for m in range(2 if kind == "gang" else 1)
        ]
        placed = check_placed_as_fresh(kept, SimClaims(scheduler.placer), members)
        for pod, _claims in members:
            if pod.key in placed:
                snapshot.assume(pod, placed[pod.key])
                bound.append(pod.key)


def check_placed_as_fresh(
    kept: SimClaims, fresh: SimClaims, members: list[Member]
) -> dict[str, Assignment]:
    """What `kept` places of `members` (two: as a gang, preferably in one rack), checked equal to
    what `fresh` places."""
    if len(members) > 1:
        rack = TopologyConstraint(label=RACK, required=False)
        got = kept.place_gang(members, topology=rack)
        assert got == fresh.place_gang(members, topology=rack)
        return dict(got.assignments) if got.ok else {}
    pod, claims = members[0]
    one = kept.choose(pod, claims)
    assert one == fresh.choose(pod, claims)
    return {} if one is None else {pod.key: one}


A100_AND_H100 = ClusterSpec(
    (
        NodeGroup(name="a", count=1, gpus=4, model="A100", cpu_milli=64_000, memory=512 * GIB),
        NodeGroup(name="h", count=1, gpus=4, model="H100", cpu_milli=64_000, memory=512 * GIB),
    )
)


def model_claim(
    name: str, model: str, *, replicas: int, count: int, priority: int, arrival: int = 0
) -> str:
    selector = f'device.attributes["gpu.gputopo.io"].productName == "{model}"'
    head = f"  - name: {name}\n    replicas: {replicas}\n    arrival: {arrival}\n"
    head += f"    duration: 10000\n    priority: {priority}\n"
    return head + claim_yaml(count, selector)


def test_a_claim_pod_evicts_only_where_its_claims_selectors_are_met(tmp_path: Path) -> None:
    """Both nodes are full: the A100 node of priority-0 pods, the H100 node of priority-5
    ones. An urgent pod's claim asks 2 H100 GPUs: read as a pod of 2 GPUs, the cheapest victims
    would be two priority-0 pods on the A100 node, after which it still could not start. Its
    claims judged by the claims code, it evicts two priority-5 pods on the H100 node and starts
    at once."""
    path = workload(
        tmp_path,
        model_claim("cheap", "A100", replicas=4, count=1, priority=0),
        model_claim("dear", "H100", replicas=4, count=1, priority=5),
        model_claim("urgent", "H100", replicas=1, count=2, priority=10, arrival=10),
    )
    result = run_events(A100_AND_H100, load_workload(str(path)), "bestfit", 1, preemption=ON)
    assert result.preemption is not None
    assert (result.preemption.preemptions, result.preemption.pods_evicted) == (1, 2)
    assert result.preemption.wasted == 0
    assert result.preemption.by_reason == {"preempt": 2}


def test_a_claim_gang_evicts_only_where_its_members_claims_are_met(tmp_path: Path) -> None:
    """The same for a gang of two pods of 2 H100 GPUs each: it evicts the four priority-5
    pods of the H100 node, not the A100 node's cheaper ones, and starts."""
    urgent = model_claim("urgent", "H100", replicas=2, count=2, priority=10, arrival=10)
    path = workload(
        tmp_path,
        model_claim("cheap", "A100", replicas=4, count=1, priority=0),
        model_claim("dear", "H100", replicas=4, count=1, priority=5),
        urgent.replace("    replicas: 2\n", "    replicas: 2\n    minMember: 2\n"),
    )
    result = run_events(A100_AND_H100, load_workload(str(path)), "bestfit", 1, preemption=ON)
    assert result.preemption is not None
    assert (result.preemption.preemptions, result.preemption.pods_evicted) == (1, 4)
    assert (result.preemption.wasted, result.preemption.partial_gangs) == (0, 0)
