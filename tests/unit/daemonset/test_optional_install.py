"""The opt-in parts of the install in daemonset/optional/: the kubelet config per distribution,
keeping another project's NodeResourceTopology CRD, and Prometheus Operator PodMonitors (the
image override the README's build step writes: test_image.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.numa_capacity import KubeletConfig
from tests.builders import manifests as checks
from tests.builders import render as r

KUBELET_CONFIG = r.OPTIONAL / "kubelet-config"
NRT_CRD = "noderesourcetopologies.topology.node.k8s.io"


def _with(*components: Path, base: Path = r.DAEMONSET) -> list[r.Obj]:
    try:
        return r.render_with_components(*components, base=base)
    except LookupError:
        pytest.skip("kubectl is not installed: components cannot be rendered")


def _agent_pod(objects) -> r.Obj:
    return r.pod_specs(r.one(objects, "DaemonSet", "gputopo-agent"))[0]


@pytest.mark.parametrize(
    ("distribution", "host_path"),
    [
        pytest.param("kubeadm", "/var/lib/kubelet/config.yaml", id="kubeadm"),
        pytest.param("eks", "/etc/kubernetes/kubelet/kubelet-config.json", id="EKS (AL2)"),
        pytest.param("gke", "/home/kubernetes/kubelet-config.yaml", id="GKE"),
    ],
)
def test_kubelet_config_component_mounts_that_distributions_file_read_only(distribution, host_path):
    pod = _agent_pod(_with(KUBELET_CONFIG / distribution))
    container = pod["containers"][0]
    flags = checks.parse_flags(container["args"])
    (volume,) = [v for v in pod["volumes"] if v["name"] == "kubelet-config"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "kubelet-config"]
    assert volume["hostPath"] == {"path": host_path, "type": "File"}  # never created on the host
    assert mount == {
        "name": "kubelet-config",
        "mountPath": flags["--kubelet-config"],
        "readOnly": True,
    }


def test_an_eks_json_kubelet_config_is_read(tmp_path):
    path = tmp_path / "kubelet-config.json"
    path.write_text(
        '{"kind": "KubeletConfiguration", "topologyManagerPolicy": "best-effort",'
        ' "reservedSystemCPUs": "0-1"}',
        encoding="utf-8",
    )
    config = KubeletConfig.from_file(path)
    assert config.topology_manager_policy == "best-effort"
    assert config.reserved_cpus == (0, 1)


def test_upstream_nrt_crd_component_leaves_only_our_crd_out(crds):
    """Used in an overlay of daemonset/crds/, which the install applies apart."""
    kept = _with(r.OPTIONAL / "upstream-nrt-crd", base=r.CRDS)
    names = {o["metadata"]["name"] for o in r.by_kind(kept, "CustomResourceDefinition")}
    shipped = {o["metadata"]["name"] for o in crds}
    assert NRT_CRD in shipped
    assert names == shipped - {NRT_CRD}
    assert len(kept) == len(crds) - 1


def test_pod_monitors_select_each_workload_and_its_metrics_port(objects):
    rendered = r.render_with_kubectl(r.kubectl_path() or "kubectl", r.OPTIONAL / "monitoring")
    assert sorted(m["kind"] for m in rendered) == [
        "ConfigMap",
        "PodMonitor",
        "PodMonitor",
        "PodMonitor",
        "PrometheusRule",
    ]
    monitors = r.by_kind(rendered, "PodMonitor")
    mps = r.render_with_kubectl(r.kubectl_path() or "kubectl", r.OPTIONAL / "mps")
    workloads = [o for o in [*objects, *mps] if o["kind"] in {"DaemonSet", "Deployment"}]
    assert len(monitors) == len(workloads) == 3  # the agent, the scheduler, optional/mps/
    for workload in workloads:
        template = workload["spec"]["template"]
        namespace = workload["metadata"]["namespace"]
        selecting = [
            m
            for m in monitors
            if m["metadata"]["namespace"] == namespace
            and m["spec"]["selector"]["matchLabels"].items()
            <= template["metadata"]["labels"].items()
        ]
        assert len(selecting) == 1, workload["metadata"]["name"]
        ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
        assert [e["port"] for e in selecting[0]["spec"]["podMetricsEndpoints"]] == ["metrics"]
        assert "metrics" in ports
