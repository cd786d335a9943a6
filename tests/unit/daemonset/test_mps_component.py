"""daemonset/optional/mps/: the `gputopo-agent mps` DaemonSet, apart from the agent's."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.mps import parser
from agent.mps.layout import MpsLayout
from tests.builders import manifests as checks
from tests.builders import render as r

MPS = r.OPTIONAL / "mps"


@pytest.fixture(scope="module")
def mps_objects() -> list[r.Obj]:
    kubectl = r.kubectl_path()
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    return r.render_with_kubectl(kubectl, MPS)


@pytest.fixture(scope="module")
def pod(mps_objects) -> r.Obj:
    return r.pod_specs(r.one(mps_objects, "DaemonSet", "gputopo-mps"))[0]


def test_it_is_one_daemonset_in_the_agents_privileged_namespace(mps_objects, objects):
    (daemonset,) = mps_objects
    assert daemonset["metadata"]["namespace"] == "gputopo-agent"
    agent = r.one(objects, "DaemonSet", "gputopo-agent")
    assert daemonset["spec"]["selector"] != agent["spec"]["selector"]


def test_it_is_privileged_as_nvidias_mps_daemon_is_and_runs_as_root(pod):
    """EXCLUSIVE_PROCESS through NVML, and each user's shm tmpfs mounted where the host sees
    it, need a privileged container (NVIDIA's MPS control daemon runs privileged)."""
    (container,) = pod["containers"]
    sec = container["securityContext"]
    assert sec["privileged"] is True
    assert "allowPrivilegeEscalation" not in sec  # the API server refuses false beside it
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod.get("automountServiceAccountToken") is False


def test_its_args_are_flags_the_command_takes_and_no_test_only_one(pod):
    (container,) = pod["containers"]
    assert container["command"] == ["gputopo-agent"]
    assert container["args"][0] == "mps"
    flags = checks.parse_flags(container["args"][1:])
    known = checks.flags_in_help(parser({}).format_help())
    assert set(flags) <= known
    assert "--nvml-fixture" not in flags
    assert parser({}).parse_args(container["args"][1:]).users == "0"


def test_the_mps_root_is_mounted_at_its_host_path_bidirectionally_and_no_host_shm(pod):
    """Pipes and each user's shm tmpfs live under the root, the same path on both sides; the
    tmpfs mounted in the container shows on the host; no host directory is anyone's /dev/shm."""
    (container,) = pod["containers"]
    root = MpsLayout(Path(checks.parse_flags(container["args"])["--mps-root"] or ""))
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert host[mounts[str(root.root)]["name"]] == str(root.root)
    assert mounts[str(root.root)]["mountPropagation"] == "Bidirectional"
    assert "/dev/shm" not in mounts
    assert sorted(host.values()) == [str(root.root)]
    assert checks.parse_flags(container["args"])["--shm-size"] == "64Mi"


def test_metrics_and_probes_use_the_commands_default_port(pod):
    (container,) = pod["containers"]
    address = checks.parse_flags(container["args"])["--metrics-address"]
    assert address == parser({}).get_default("metrics_address")
    (port,) = container["ports"]
    assert (port["name"], f":{port['containerPort']}") == ("metrics", address)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
