"""gputopo against the NodeResourceTopology CRD another project installed (NFD, the NUMA
resources operator, scheduler-plugins), not ours: `optional/upstream-nrt-crd/` keeps that one.

The upstream CRD (upstream-nrt-crd.yaml here, written from the reference notes) is applied to the
fake API server, which prunes and validates custom objects by it as kube-apiserver does. The real
agent publishes through it, and the real scheduler reads the stored object and places a pod."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes import client

from agent.nrt import decode
from tests.builders.agentnode import NODE, NODE_CAPACITY
from tests.builders.scheduler import bound_pods, create_pod, pod_body, running, wait_for
from tests.fakeapi import FakeApiServer
from tests.fakeapi.resources import crd_problems, podgroup_crd, queue_crd

ROOT = Path(__file__).resolve().parents[4]
UPSTREAM_CRD = Path(__file__).resolve().parent / "upstream-nrt-crd.yaml"
PLURAL = "noderesourcetopologies"


def _agent(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUTOPO_", "NODE_NAME"))}
    command = [
        sys.executable, "-m", "agent.cli", "run", "--oneshot", "--node-name", NODE,
        "--nvml-fixture", "dgx-h100", "--pod-resources-socket", str(tmp / "absent.sock"),
        "--kubelet-config", str(tmp / "absent.yaml"), *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)


def test_the_agent_and_the_scheduler_work_against_the_upstream_crd(tmp_path) -> None:
    crd = yaml.safe_load(UPSTREAM_CRD.read_text(encoding="utf-8"))
    assert crd_problems(crd) == []
    with FakeApiServer(install_crds=False) as fake:
        fake.register_crd(crd)
        fake.register_crd(podgroup_crd())
        fake.register_crd(queue_crd())
        fake.add_node(NODE, capacity=NODE_CAPACITY)
        printed = _agent(tmp_path, "--dry-run")
        published = _agent(tmp_path, "--kubeconfig", str(fake.write_kubeconfig(tmp_path / "kc")))
        stored = fake.get_object(PLURAL, NODE)
        with running(fake) as runtime:
            wait_for(lambda: NODE in runtime.cache.nrts, 5, "the scheduler's copy of the NRT")
            read = runtime.cache.nrts[NODE]
            api = fake.api_client()
            create_pod(client.CoreV1Api(api), pod_body("train", gpus=8))
            placed = wait_for(lambda: bound_pods(fake).get("train"), 10, "the 8-GPU pod bound")
            api.close()
    assert printed.returncode == 0, printed.stderr
    assert published.returncode == 0, published.stderr
    assert stored is not None
    (intended,) = [
        d for d in yaml.safe_load_all(printed.stdout) if d["kind"] == "NodeResourceTopology"
    ]
    # Nothing the agent writes is pruned or rejected by the upstream schema (the two runs
    # measured GPU use at different times: `measuredAt` may differ, issue 47):
    assert _unstamped(stored["zones"]) == _unstamped(intended["zones"])
    assert any(a["name"] == "measuredAt" for a in stored["zones"][-1]["attributes"])
    assert stored["attributes"] == intended["attributes"]
    assert len(decode(stored).inventory.gpus) == 8
    assert len(read.inventory.gpus) == 8
    assert (
        read.inventory.links.nvlink_islands() == decode(intended).inventory.links.nvlink_islands()
    )
    assert placed == NODE


def _unstamped(zones: list[dict]) -> list[dict]:
    """`zones` with each GPU zone's `measuredAt` value blanked."""
    return [
        {
            **zone,
            "attributes": [
                {**a, "value": ""} if a["name"] == "measuredAt" else a
                for a in zone.get("attributes", [])
            ],
        }
        for zone in zones
    ]
