"""The shipped manifests against a real API server 1.37: every kustomization a user applies passes
the server's own validation and admission (`kubectl apply --dry-run=server`), the CRDs included
(structural schemas, CEL rules and their cost estimates)."""

from __future__ import annotations

import json

import pytest

from tests.builders.process import ROOT
from tests.builders.realk8s import Cluster

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(120)]
DAEMONSET = ROOT / "daemonset"


@pytest.mark.parametrize(
    "kustomization",
    [
        pytest.param("", id="the install"),
        pytest.param("optional/mps", id="MPS DaemonSet"),
        pytest.param("optional/admission", id="admission policies"),
        pytest.param("optional/queue-label", id="queue-label policy"),
    ],
)
def test_the_server_accepts_each_kustomization(cluster: Cluster, kustomization: str) -> None:
    folder = DAEMONSET / kustomization
    out = cluster.kubectl("apply", "--dry-run=server", "-k", str(folder))
    assert "created (server dry run)" in out or "configured (server dry run)" in out, out


def test_the_crds_are_established(cluster: Cluster) -> None:
    names = cluster.kubectl("get", "crd", "-o", "name").split()
    assert {
        "customresourcedefinition.apiextensions.k8s.io/noderesourcetopologies.topology.node.k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.x-k8s.io",
    } <= set(names)
    assert any(name.endswith(".gputopo.io") for name in names), names


def queue(name: str, key: str) -> str:
    return json.dumps({
        "apiVersion": "scheduling.gputopo.io/v1alpha1", "kind": "Queue",
        "metadata": {"name": name}, "spec": {"max": {key: "8"}},
    })  # fmt: skip


def test_the_queue_crd_refuses_a_model_key_as_kubectl_gputopo_nodes_prints_it(
    cluster: Cluster,
) -> None:
    good = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                           stdin=queue("good", "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"))  # fmt: skip
    assert "created (server dry run)" in good
    bad = cluster.kubectl("apply", "--dry-run=server", "-f", "-", check=False,
                          stdin=queue("bad", "nvidia.com/gpu@NVIDIA H100 80GB HBM3"))  # fmt: skip
    assert "Invalid value" in bad, bad
    assert "spec.max" in bad, bad
