"""Claim-style pods in the simulator: read from the workload, placed by the claims code."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.model import NvlinkFabric
from scheduler.placement import NodeState
from scheduler.sim.claims import claim_node
from scheduler.sim.cluster import make_links
from scheduler.sim.events import run_events
from scheduler.sim.workload import GIB, ClusterSpec, NodeGroup, load_workload
from scheduler.sim.yamlread import WorkloadError

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
            "  - name: g\n    replicas: 2\n    minMember: 2\n" + claim_yaml(1),
            "not gangs",
            id="gang",
        ),
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
