"""The scheduler Deployment: two replicas behind a Lease, spread over nodes, not root."""

from __future__ import annotations

import importlib.util
import re

import pytest
import yaml

from agent.shares import DEFAULT_SHARE_LOCK_NAMESPACE
from tests.builders import manifests as checks
from tests.builders import render as r


@pytest.fixture(scope="module")
def deployment(objects: tuple[r.Obj, ...]) -> r.Obj:
    return r.one(objects, "Deployment", "gputopo-scheduler")


@pytest.fixture(scope="module")
def pod(deployment: r.Obj) -> r.Obj:
    spec: r.Obj = deployment["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def container(pod: r.Obj) -> r.Obj:
    found: r.Obj = pod["containers"][0]
    return found


def test_two_replicas_with_leader_election(deployment, container):
    flags = checks.parse_flags(container["args"])
    assert deployment["spec"]["replicas"] == 2
    assert container["command"] == ["gputopo-scheduler"]
    assert container["args"][0] == "run"
    assert "--leader-elect" in flags
    assert flags["--leader-elect"] is None, "a bare switch"
    assert flags["--config"] == "/etc/gputopo/scheduler.yaml"
    assert flags.get("--scheduler-name", "gputopo-scheduler") == "gputopo-scheduler"


def test_lease_namespace_is_where_the_role_grants_it(objects, pod, container):
    env = {e["name"]: e for e in container["env"]}
    namespace_arg = checks.parse_flags(container["args"]).get(
        "--leader-elect-namespace", "gputopo-system"
    )
    if namespace_arg == "$(POD_NAMESPACE)":
        assert env["POD_NAMESPACE"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "metadata.namespace"}
        }
        namespace_arg = r.one(objects, "Deployment", "gputopo-scheduler")["metadata"]["namespace"]
    lease_roles = [
        o
        for o in r.by_kind(objects, "Role")
        if any("leases" in rule["resources"] for rule in o["rules"])
    ]
    assert {o["metadata"]["namespace"] for o in lease_roles} == {namespace_arg}
    # the scheduler's own Leases and the agent's share locks (DESIGN §12), where the agent looks
    agent = r.one(objects, "DaemonSet", "gputopo-agent")["spec"]["template"]["spec"]
    agent_flags = checks.parse_flags(agent["containers"][0]["args"])
    assert agent_flags.get("--share-lock-namespace", DEFAULT_SHARE_LOCK_NAMESPACE) == namespace_arg


def test_replicas_prefer_different_nodes(deployment, pod):
    preferred = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert len(preferred) == 1
    term = preferred[0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in term["labelSelector"]["matchLabels"].items())
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution" not in pod["affinity"]["podAntiAffinity"]
    )


def test_runs_as_the_image_non_root_user(pod):
    sec = pod["securityContext"]
    assert sec["runAsNonRoot"] is True
    assert sec["runAsUser"] == 65532


def test_scheduler_is_placed_by_the_default_scheduler(pod):
    """It cannot schedule itself: it is not running yet."""
    assert pod.get("schedulerName", "default-scheduler") == "default-scheduler"


def test_scheduler_config_is_v1(objects):
    data = yaml.safe_load(
        r.one(objects, "ConfigMap", "gputopo-scheduler-config")["data"]["scheduler.yaml"]
    )
    assert data["version"] == "v1"


def _keys(tree: object, prefix: str = "") -> set[str]:
    if not isinstance(tree, dict):
        return set()
    found = set()
    for key, value in tree.items():
        found.add(f"{prefix}{key}")
        found |= _keys(value, f"{prefix}{key}.")
    return found


def test_scheduler_config_uses_only_keys_of_the_default_config(objects):
    default = r.REPO / "scheduler" / "default-config.yaml"
    if not default.is_file():
        pytest.skip(
            "scheduler/default-config.yaml is not in the tree yet (written by the placement part)"
        )
    ours = yaml.safe_load(
        r.one(objects, "ConfigMap", "gputopo-scheduler-config")["data"]["scheduler.yaml"]
    )
    reference = yaml.safe_load(default.read_text(encoding="utf-8"))
    assert _keys(ours) - _keys(reference) == set()
    assert ours["version"] == reference["version"]


def test_scheduler_config_spells_out_the_shipped_defaults(objects):
    default = r.REPO / "scheduler" / "default-config.yaml"
    if not default.is_file():
        pytest.skip("scheduler/default-config.yaml is not in the tree yet")
    ours = yaml.safe_load(
        r.one(objects, "ConfigMap", "gputopo-scheduler-config")["data"]["scheduler.yaml"]
    )
    assert ours == yaml.safe_load(default.read_text(encoding="utf-8")), (
        "daemonset/configmaps.yaml (scheduler.yaml) says it spells out the shipped defaults: "
        "copy the changed values from scheduler/default-config.yaml"
    )


def test_scheduler_config_loads_with_the_schedulers_own_parser(objects):
    if importlib.util.find_spec("scheduler.config") is None:
        pytest.skip("scheduler/config.py is not in the tree yet")
    from scheduler.config import parse_config

    text = r.one(objects, "ConfigMap", "gputopo-scheduler-config")["data"]["scheduler.yaml"]
    config = parse_config(yaml.safe_load(text), source="configmap gputopo-scheduler-config")
    assert config.scheduler_name == "gputopo-scheduler"
    assert "gputopo.io/rack" in config.topology_levels


def _kubelet_expand(arg: str, env: dict[str, str]) -> str:
    """`$(NAME)` as the kubelet expands it from the container's env."""
    return re.sub(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], arg)


def test_scheduler_run_accepts_the_manifest_args(objects, deployment, container, tmp_path):
    if importlib.util.find_spec("scheduler.cli.run") is None:
        pytest.skip("scheduler/run_cmd.py is not in the tree yet")
    from scheduler.cli.settings import load

    config = tmp_path / "scheduler.yaml"
    config.write_text(
        r.one(objects, "ConfigMap", "gputopo-scheduler-config")["data"]["scheduler.yaml"],
        encoding="utf-8",
    )
    env = {"POD_NAMESPACE": deployment["metadata"]["namespace"]}
    args = [_kubelet_expand(a, env) for a in container["args"][1:]]
    args = [f"--config={config}" if a.startswith("--config=") else a for a in args]
    settings = load(args, {})
    assert settings.leader_elect is True
    assert settings.leader_elect_namespace == "gputopo-system"
    assert settings.scheduler_name == "gputopo-scheduler"
    assert settings.metrics_address == ":9446"
    assert settings.log_format == "json"
    assert "gputopo.io/rack" in settings.config.topology_levels
