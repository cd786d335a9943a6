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


def test_it_adds_only_setuid_and_setgid_to_a_root_container(pod):
    (container,) = pod["containers"]
    sec = container["securityContext"]
    assert sec["capabilities"] == {"drop": ["ALL"], "add": ["SETUID", "SETGID"]}
    assert sec["allowPrivilegeEscalation"] is False
    assert not sec.get("privileged")
    assert pod["securityContext"]["runAsUser"] == 0
    problems = checks.baseline_problems(pod)
    assert all(p.startswith("hostPath volume ") for p in problems), problems


def test_its_args_are_flags_the_command_takes_and_no_test_only_one(pod):
    (container,) = pod["containers"]
    assert container["command"] == ["gputopo-agent"]
    assert container["args"][0] == "mps"
    flags = checks.parse_flags(container["args"][1:])
    known = checks.flags_in_help(parser({}).format_help())
    assert set(flags) <= known
    assert "--nvml-fixture" not in flags
    assert parser({}).parse_args(container["args"][1:]).users == "0"


def test_the_mps_root_is_mounted_at_its_host_path_and_its_shm_as_dev_shm(pod):
    (container,) = pod["containers"]
    root = MpsLayout(Path(checks.parse_flags(container["args"])["--mps-root"] or ""))
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: host.get(m["name"]) for m in container["volumeMounts"]}
    assert mounts[str(root.root)] == str(root.root)  # pipe directories: same path both sides
    assert mounts["/dev/shm"] == str(root.shm_dir)


def test_metrics_and_probes_use_the_commands_default_port(pod):
    (container,) = pod["containers"]
    address = checks.parse_flags(container["args"])["--metrics-address"]
    assert address == parser({}).get_default("metrics_address")
    (port,) = container["ports"]
    assert (port["name"], f":{port['containerPort']}") == ("metrics", address)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
