"""The agent DaemonSet: where it runs, what it may touch on the host, how it is configured."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli.config import load
from agent.shares import DEFAULT_MPS_ROOT
from tests.builders import manifests as checks
from tests.builders import render as r


@pytest.fixture(scope="module")
def daemonset(objects: tuple[r.Obj, ...]) -> r.Obj:
    return r.one(objects, "DaemonSet", "gputopo-agent")


@pytest.fixture(scope="module")
def pod(daemonset: r.Obj) -> r.Obj:
    spec: r.Obj = daemonset["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def container(pod: r.Obj) -> r.Obj:
    found: r.Obj = pod["containers"][0]
    return found


def _term(key: str, operator: str = "In") -> r.Obj:
    expression: r.Obj = {"key": key, "operator": operator}
    if operator == "In":
        expression["values"] = ["true"]
    return {"matchExpressions": [expression]}


def test_runs_on_nodes_any_labeller_marks_and_never_on_its_own_label_alone(pod):
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        _term("feature.node.kubernetes.io/pci-10de.present"),  # NFD, GPU Operator's config
        _term("feature.node.kubernetes.io/pci-0302_10de.present"),  # NFD defaults: 3D controller
        _term("feature.node.kubernetes.io/pci-0300_10de.present"),  # NFD defaults: VGA
        _term("nvidia.com/gpu.present"),  # GFD
        _term("cloud.google.com/gke-accelerator", "Exists"),  # GKE GPU node pools
        _term("gputopo.io/gpu-node"),  # set by the admin where nothing else labels
    ]
    assert "nodeSelector" not in pod, "a nodeSelector would AND with the affinity terms"


def test_tolerates_gpu_critical_addon_and_dedicated_taints(pod):
    tolerations = {(t["key"], t["operator"], t.get("effect")) for t in pod["tolerations"]}
    assert tolerations == {
        ("nvidia.com/gpu", "Exists", "NoSchedule"),
        ("CriticalAddonsOnly", "Exists", None),
        ("gputopo.io/dedicated", "Exists", None),  # README: GPU nodes given to gputopo alone
    }


def test_node_critical_with_nvidia_runtime(pod):
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["runtimeClassName"] == "nvidia"
    assert not pod.get("hostNetwork")
    assert not pod.get("hostPID")


def test_rolls_one_node_at_a_time(daemonset):
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }


def test_env_for_nvml_and_node_name(container):
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"


def test_root_without_capabilities(pod, container):
    assert pod["securityContext"]["runAsUser"] == 0
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


# mountPath -> (host path, read-only)
HOST_MOUNTS = {
    "/var/lib/kubelet/device-plugins": ("/var/lib/kubelet/device-plugins", False),
    "/var/lib/kubelet/pod-resources": ("/var/lib/kubelet/pod-resources", True),
    "/host/sys/devices": ("/sys/devices", True),
    "/host/sys/bus/pci/devices": ("/sys/bus/pci/devices", True),
    "/run/gputopo/mps": ("/run/gputopo/mps", True),
    "/var/lib/gputopo": ("/var/lib/gputopo", False),
}


def test_host_paths_and_their_modes(pod, container):
    volumes = {v["name"]: v for v in pod["volumes"]}
    host = {
        m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], bool(m.get("readOnly")))
        for m in container["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }
    assert host == HOST_MOUNTS


def test_only_the_device_plugin_dir_and_the_agents_state_are_writable_on_the_host(pod, container):
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = [
        m["mountPath"]
        for m in container["volumeMounts"]
        if not m.get("readOnly") and "hostPath" in volumes[m["name"]]
    ]
    assert writable == ["/var/lib/kubelet/device-plugins", "/var/lib/gputopo"]
    record = load(["--node-name", "n"], {}).share_record  # the default the manifest keeps
    assert record.parent == Path("/var/lib/gputopo")  # on the writable state mount


def test_the_mps_status_is_read_where_the_mps_daemonset_writes_it(pod, container):
    """The agent reads <--mps-root>/status.json through a read-only mount of the MPS DaemonSet's
    root, at the host path (Allocate hands out host paths under it)."""
    text = (r.OPTIONAL / "mps" / "mps-daemonset.yaml").read_text(encoding="utf-8")
    mps_pod = r.pod_specs(yaml.safe_load(text))[0]
    mps_flags = checks.parse_flags(mps_pod["containers"][0]["args"])
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    root = str(mps_flags["--mps-root"])
    assert root == DEFAULT_MPS_ROOT  # the agent's --mps-root default, not set in its args
    assert "--mps-root" not in checks.parse_flags(container["args"])
    assert mounts[root]["readOnly"] is True
    assert volumes[mounts[root]["name"]]["hostPath"] == {"path": root, "type": "DirectoryOrCreate"}


def test_flags_point_at_the_mounts(container):
    flags = checks.parse_flags(container["args"])
    assert container["command"] == ["gputopo-agent"]
    assert container["args"][0] == "run"
    assert flags["--host-root"] == "/host"
    assert "--kubelet-config" not in flags  # where it lives differs: optional/kubelet-config/
    assert flags["--config"] == "/etc/gputopo/agent.yaml"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    host_root = flags["--host-root"]
    assert {f"{host_root}/sys/devices", f"{host_root}/sys/bus/pci/devices"} <= mounts
    assert flags["--device-plugin-dir"] in mounts
    socket = flags["--pod-resources-socket"]
    assert socket is not None
    assert socket.rpartition("/")[0] in mounts


def test_requests_and_limits(container):
    resources = container["resources"]
    assert {k: str(v) for k, v in resources["requests"].items()} == {
        "cpu": "50m",
        "memory": "128Mi",
    }
    assert {k: str(v) for k, v in resources["limits"].items()} == {"cpu": "500m", "memory": "256Mi"}


def test_agent_config_is_a_v1_device_plugin_style_file(objects):
    data = yaml.safe_load(r.one(objects, "ConfigMap", "gputopo-agent-config")["data"]["agent.yaml"])
    assert data["version"] == "v1"
    assert set(data) <= {"version", "flags", "sharing", "resources", "imex"}
    assert data["flags"]["migStrategy"] in {"none", "single", "mixed"}


def _agent_load(args: list[str], environ: dict[str, str]) -> Any:
    if importlib.util.find_spec("agent.cli.config") is None:
        pytest.skip("agent/config.py is not in the tree yet")
    from agent.cli.config import load

    return load(args, environ)


def _loader_inputs(
    container: r.Obj, config_text: str, directory: Path
) -> tuple[list[str], dict[str, str]]:
    """The container's args with --config pointing at a temp copy of the ConfigMap file, its env."""
    path = directory / "agent.yaml"
    path.write_text(config_text, encoding="utf-8")
    args = [
        a if not a.startswith("--config=") else f"--config={path}" for a in container["args"][1:]
    ]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    env["NODE_NAME"] = "gpu-node-1"  # what the downward API fills in
    return args, env


def test_agent_loader_accepts_the_manifest_and_configmap(objects, container, tmp_path):
    text = r.one(objects, "ConfigMap", "gputopo-agent-config")["data"]["agent.yaml"]
    config = _agent_load(*_loader_inputs(container, text, tmp_path))
    assert config.node_name == "gpu-node-1"
    assert str(config.host_root) == "/host"
    assert str(config.mig_strategy) == "mixed"
    assert config.metrics_address == ":9445"
    assert config.log_format == "json"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert [str(s) for s in config.plugin.device_list_strategies] == ["envvar"]
    assert not {str(p) for p in config.plugin.cdi_spec_dirs} & mounts  # read only by cdi-cri
    assert str(config.device_plugin_dir) in mounts


def test_time_slicing_example_in_the_configmap_is_valid(objects, container, tmp_path):
    """The commented-out `sharing:` block works once uncommented."""
    text = r.one(objects, "ConfigMap", "gputopo-agent-config")["data"]["agent.yaml"]
    uncommented = re.sub(r"^# (sharing:|\s)", r"\1", text, flags=re.MULTILINE)
    assert "\nsharing:" in uncommented
    config = _agent_load(*_loader_inputs(container, uncommented, tmp_path))
    (resource,) = config.plugin.time_slicing.resources
    assert (resource.name, resource.replicas) == ("nvidia.com/gpu", 4)


def test_without_the_kubelet_config_the_configmap_gives_the_topology_manager_settings(
    objects, container, tmp_path
):
    text = r.one(objects, "ConfigMap", "gputopo-agent-config")["data"]["agent.yaml"]
    default = _agent_load(*_loader_inputs(container, text, tmp_path))
    assert (default.topology_manager_policy, default.topology_manager_scope) == (
        "none",
        "container",
    )
    uncommented = re.sub(r"^# (topologyManager)", r"\1", text, flags=re.MULTILINE)
    config = _agent_load(*_loader_inputs(container, uncommented, tmp_path))
    assert (config.topology_manager_policy, config.topology_manager_scope) == (
        "single-numa-node",
        "pod",
    )
