"""`scheduler.sim.workload` / `build`: YAML jobs and node groups, trace CSVs, built-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.placement import GPU_PRODUCT_LABEL, TopologyConstraint
from scheduler.sim.build import build_cluster, job_requests, node_names, ranked_names
from scheduler.sim.workload import (
    GIB,
    MIB,
    WorkloadError,
    builtin_names,
    load_cluster,
    load_workload,
)
from tests.builders.sim import CLUSTER_YAML, WORKLOAD_YAML, write_trace


def write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_jobs_expand_counts_and_read_every_pod_field(tmp_path: Path):
    workload = load_workload(write(tmp_path, "w.yaml", WORKLOAD_YAML))
    names = [j.name for j in workload.jobs]
    assert names == ["infer-0", "note", "infer-1", "infer-2", "train"]  # by arrival, then name
    train = workload.jobs[4]
    assert (train.replicas, train.min_member, train.is_gang, train.duration) == (2, 2, True, 100.0)
    assert (train.pod.cpu_milli, train.pod.memory, train.pod.gpus) == (8000, 64 * GIB, 8)
    infer = workload.jobs[2]
    assert (infer.arrival, infer.pod.memory, infer.pod.gpu_models) == (5.0, 512 * MIB, {"Tesla-T4"})
    note = workload.jobs[1]
    assert (note.pod.gpu_milli, note.duration, note.pod.pod_class) == (250, None, "share")


def test_gang_jobs_become_pod_group_members(tmp_path: Path):
    workload = load_workload(write(tmp_path, "w.yaml", WORKLOAD_YAML))
    train = next(j for j in workload.jobs if j.name == "train")
    pods = job_requests(train)
    assert [p.key for p in pods] == ["train-0", "train-1"]
    assert {p.pod_group for p in pods} == {"train"}
    assert [p.key for p in job_requests(workload.jobs[1])] == ["note"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("version: v2\njobs: []\n", r"w.yaml: version: unsupported", id="version"),
        pytest.param("version: v1\njobs: [{name: a}]\n", r"jobs\[0\].pod: required", id="pod"),
        pytest.param(
            "version: v1\njobs: [{name: a, pod: {gpus: 1, gpuShare: 5}}]\n",
            r"jobs\[0\].pod: gpus, gpuShare, gpuMemory/gpuCompute, mig and claims are exclusive",
            id="exclusive",
        ),
        pytest.param(
            "version: v1\njobs: [{name: a, replicas: 2, minMember: 3, pod: {}}]\n",
            r"jobs\[0\].minMember: 3 is more than replicas",
            id="minMember",
        ),
        pytest.param(
            "version: v1\njobs: [{name: a, pod: {gpuShare: 1000}}]\n",
            r"jobs\[0\].pod.gpuShare: 1000 is not a share",
            id="share",
        ),
        pytest.param(
            "version: v1\njobs: [{name: a, pod: {}, colour: red}]\n",
            r"jobs\[0\].colour: unknown key",
            id="unknown",
        ),
        pytest.param(
            "version: v1\njobs: [{name: a, pod: {}}, {name: a, pod: {}}]\n",
            r"duplicate job name 'a'",
            id="duplicate",
        ),
        pytest.param("version: v1\njobs: [\n", r"not valid YAML/JSON", id="syntax"),
        pytest.param(
            "version: v1\njobs: [{name: a, pod: {}, topology: {required: r, preferred: r}}]\n",
            r"jobs\[0\].topology: give exactly one of required or preferred",
            id="topology-both",
        ),
        pytest.param(
            "version: v1\njobs: [{name: a, pod: {}, topology: {spread: r}}]\n",
            r"jobs\[0\].topology.spread: unknown key",
            id="topology-unknown",
        ),
    ],
)
def test_bad_workloads_name_the_file_and_key(tmp_path: Path, text: str, message: str):
    with pytest.raises(WorkloadError, match=message):
        load_workload(write(tmp_path, "w.yaml", text))


QUEUES_YAML = """version: v1
queues:
  - {name: org, max: {nvidia.com/gpu: 12}}
  - {name: a, parent: org, min: {nvidia.com/gpu: 4}, weight: 2}
  - {name: b, parent: org, max: {nvidia.com/gpu: "10"}}
jobs:
  - {name: j, queue: a, priority: 5, pod: {gpus: 1}}
  - {name: k, pod: {gpus: 1}}
"""


def test_queues_are_read_as_queue_objects_and_jobs_name_their_leaf(tmp_path: Path):
    workload = load_workload(write(tmp_path, "w.yaml", QUEUES_YAML))
    by_name = {q.name: q for q in workload.queues}
    assert set(by_name) == {"org", "a", "b"}
    assert dict(by_name["org"].max) == {"nvidia.com/gpu": 12_000}  # milli-GPUs, as quota counts
    assert (by_name["a"].parent, dict(by_name["a"].min), by_name["a"].weight) == (
        "org",
        {"nvidia.com/gpu": 4000},
        2,
    )
    assert dict(by_name["b"].max) == {"nvidia.com/gpu": 10_000}
    jobs = {j.name: j for j in workload.jobs}
    assert (jobs["j"].queue, jobs["j"].priority) == ("a", 5)
    assert (jobs["k"].queue, jobs["k"].priority) == (None, 0)


@pytest.mark.parametrize(
    ("queues", "job_queue", "message"),
    [
        pytest.param(
            "[{name: a}, {name: b, min: {nvidia.com/gpu: 4}, max: {nvidia.com/gpu: 2}}]",
            "a",
            r"queues\[1\]: Queue b: spec.min\[nvidia.com/gpu\] is above spec.max",
            id="min above max",
        ),
        pytest.param(
            "[{name: a, max: {nvidia.com/gpu: -1}}]",
            "a",
            r"queues\[0\]: Queue a: spec.max\[nvidia.com/gpu\]: must not be negative",
            id="negative",
        ),
        pytest.param(
            "[{name: a, weight: 0}]",
            "a",
            r"queues\[0\]: Queue a: spec.weight: must be an integer >= 1",
            id="weight",
        ),
        pytest.param(
            "[{name: a, parent: nope}]",
            "a",
            r"queues\[0\]: queue a: parent nope does not exist",
            id="unknown parent",
        ),
        pytest.param(
            "[{name: a, parent: b}, {name: b, parent: a}]",
            "a",
            r"queues\[0\]: queue a: parents form a cycle",
            id="cycle",
        ),
        pytest.param("[{name: a, colour: red}]", "a", r"queues\[0\].colour: unknown key", id="key"),
        pytest.param("[{name: a}]", "x", r"jobs\[0\].queue: 'x' is not a leaf queue", id="job"),
        pytest.param(
            "[{name: a}, {name: b, parent: a}]",
            "a",
            r"jobs\[0\].queue: 'a' is not a leaf queue",
            id="inner queue",
        ),
    ],
)
def test_a_bad_queue_is_one_error_naming_the_entry_and_field(
    tmp_path: Path, queues: str, job_queue: str, message: str
):
    text = f"version: v1\nqueues: {queues}\njobs: [{{name: j, queue: {job_queue}, pod: {{}}}}]\n"
    with pytest.raises(WorkloadError, match=message):
        load_workload(write(tmp_path, "w.yaml", text))


def test_json_workloads_are_read(tmp_path: Path):
    doc = '{"version": "v1", "jobs": [{"name": "a", "replicas": 3, "pod": {"gpus": 2}}]}'
    workload = load_workload(write(tmp_path, "w.json", doc))
    assert (workload.jobs[0].replicas, workload.jobs[0].pod.gpus) == (3, 2)


def test_node_groups_build_labelled_nodes(tmp_path: Path):
    spec = load_cluster(write(tmp_path, "c.yaml", CLUSTER_YAML))
    assert spec.gpu_count == 2 * 8 + 2 * 2  # fixture GPUs are counted from the fixture
    assert node_names(spec) == ["dgx-0", "dgx-1", "t4-0", "t4-1"]
    cluster = build_cluster(spec)
    dgx1 = cluster.snapshot.node("dgx-1")
    assert dgx1.labels["gputopo.io/rack"] == "rack-0"
    assert dgx1.labels["gputopo.io/slot"] == "s1"
    assert dgx1.gpu_count == 8
    assert dgx1.links is not None
    assert dgx1.links.link(0, 1).nvlinks > 0
    t4 = cluster.snapshot.node("t4-0")
    assert t4.labels[GPU_PRODUCT_LABEL] == "Tesla-T4"
    assert (t4.labels["pool"], t4.allocatable["cpu"], t4.allocatable["memory"]) == (
        "inference",
        32_000,
        128 * GIB,
    )


def test_bad_node_groups(tmp_path: Path):
    both = "version: v1\nnodeGroups: [{name: a, fixture: dgx-h100, gpus: 2, model: X}]\n"
    with pytest.raises(WorkloadError, match=r"nodeGroups\[0\]: give either fixture or gpus"):
        load_cluster(write(tmp_path, "c.yaml", both))
    no_model = "version: v1\nnodeGroups: [{name: a, gpus: 2}]\n"
    with pytest.raises(WorkloadError, match=r"nodeGroups\[0\].model: required when gpus"):
        load_cluster(write(tmp_path, "c.yaml", no_model))
    bad_fixture = "version: v1\nnodeGroups: [{name: a, fixture: no-such-fixture}]\n"
    with pytest.raises(WorkloadError, match=r"nodeGroups\[0\].fixture: .*no such built-in"):
        load_cluster(write(tmp_path, "c.yaml", bad_fixture))


def test_trace_csvs_are_clusters_and_workloads(tmp_path: Path):
    nodes, pods = write_trace(tmp_path, pods=10)
    spec = load_cluster(str(nodes))
    assert spec.gpu_count == 22
    assert node_names(spec)[:2] == ["node-00", "node-01"]
    workload = load_workload(str(pods))
    assert workload.from_trace
    assert len(workload.jobs) == 10
    renamed = ranked_names(node_names(spec), [3, 0, 4, 1, 2])
    assert renamed["node-00"] == "0003-node-00"
    assert sorted(build_cluster(spec, renamed.__getitem__).snapshot.names())[0] == "0000-node-01"


def test_builtins_load_and_unknown_names_are_listed():
    assert "default" in builtin_names("cluster")
    assert "default" in builtin_names("workload")
    assert load_cluster("default").gpu_count > 0
    assert any(j.is_gang for j in load_workload("default").jobs)
    with pytest.raises(WorkloadError, match=r"nope: no such built-in workload \(built-in: default"):
        load_workload("nope")


def test_jobs_read_their_topology_constraint(tmp_path: Path):
    text = (
        "version: v1\njobs:\n"
        "  - {name: a, pod: {}, topology: {required: nvidia.com/gpu.clique}}\n"
        "  - {name: b, pod: {}, topology: {preferred: gputopo.io/rack}}\n"
        "  - {name: c, pod: {}}\n"
    )
    a, b, c = load_workload(write(tmp_path, "w.yaml", text)).jobs
    assert a.topology == TopologyConstraint(label="nvidia.com/gpu.clique", required=True)
    assert b.topology == TopologyConstraint(label="gputopo.io/rack", required=False)
    assert c.topology is None
