"""The shipped manifests against a real API server 1.37: every kustomization a user applies passes
the server's own validation and admission (`kubectl apply --dry-run=server`), the CRDs included
(structural schemas, CEL rules and their cost estimates)."""

from __future__ import annotations

import json

import pytest

from tests.builders.process import ROOT
from tests.builders.realk8s import Cluster
from tests.builders.render import load_file

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


@pytest.mark.parametrize(
    "manifest",
    [
        pytest.param("optional/dra/dra.yaml", id="DRA DeviceClasses and RBAC"),
        pytest.param(
            "optional/dra/extended-resource/deviceclass.yaml", id="nvidia.com/gpu DeviceClass"
        ),
    ],
)
def test_the_server_accepts_each_dra_manifest_field_for_field(
    cluster: Cluster, manifest: str
) -> None:
    """The DRA parts are kustomize Components (no `apply -k` of their own): their files. A field
    the server does not know or has switched off (extendedResourceName without the
    DRAExtendedResource gate) would be dropped, not refused: the answer must keep every one."""
    path = DAEMONSET / manifest
    out = cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-f", str(path))
    doc = json.loads(out)
    answered = doc["items"] if doc.get("kind") == "List" else [doc]
    classes = {o["metadata"]["name"]: o["spec"] for o in answered if o["kind"] == "DeviceClass"}
    written = {
        o["metadata"]["name"]: o["spec"] for o in load_file(path) if o["kind"] == "DeviceClass"
    }
    assert set(classes) == set(written)
    for name, spec in written.items():
        assert classes[name].get("extendedResourceName") == spec.get("extendedResourceName")
        assert classes[name]["selectors"] == spec["selectors"]


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
