"""Both workloads: selectors, config mounts, probes, ports, security and env wiring."""

from __future__ import annotations

import pytest

from agent.quantity import parse_quantity
from tests.builders import manifests as checks
from tests.builders import render as r

WORKLOADS = [
    pytest.param("DaemonSet", "gputopo-agent", 9445, id="agent"),
    pytest.param("Deployment", "gputopo-scheduler", 9446, id="scheduler"),
]


def _container(obj: r.Obj) -> r.Obj:
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: r.Obj = containers[0]
    return container


def _selector_matches(selector: r.Obj, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are used here"
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize(("kind", "name", "port"), WORKLOADS)
def test_selector_matches_pod_template(objects, kind, name, port):
    obj = r.one(objects, kind, name)
    labels = obj["spec"]["template"]["metadata"]["labels"]
    assert _selector_matches(obj["spec"]["selector"], labels)
    other = [o for o in objects if o["kind"] in {"DaemonSet", "Deployment"} and o is not obj]
    assert not any(
        _selector_matches(obj["spec"]["selector"], o["spec"]["template"]["metadata"]["labels"])
        for o in other
    )


@pytest.mark.parametrize(("kind", "name", "port"), WORKLOADS)
def test_config_file_comes_from_a_rendered_configmap(objects, kind, name, port):
    obj = r.one(objects, kind, name)
    spec, container = obj["spec"]["template"]["spec"], _container(obj)
    config_path = checks.parse_flags(container["args"])["--config"]
    assert config_path is not None
    mounts = [
        m
        for m in container["volumeMounts"]
        if config_path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert len(mounts) == 1
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[0]["name"])
    relative = config_path[len(mounts[0]["mountPath"].rstrip("/")) + 1 :]
    items = {i["path"]: i["key"] for i in volume["configMap"]["items"]}
    configmap = r.one(objects, "ConfigMap", volume["configMap"]["name"])
    assert items[relative] in configmap["data"]
    assert mounts[0].get("readOnly") is True


@pytest.mark.parametrize(("kind", "name", "port"), WORKLOADS)
def test_volumes_and_mounts_pair_up(objects, kind, name, port):
    obj = r.one(objects, kind, name)
    volumes = {v["name"] for v in obj["spec"]["template"]["spec"]["volumes"]}
    mounted = {m["name"] for m in _container(obj)["volumeMounts"]}
    assert mounted == volumes


@pytest.mark.parametrize(("kind", "name", "port"), WORKLOADS)
def test_metrics_port_probes_and_address_agree(objects, kind, name, port):
    container = _container(r.one(objects, kind, name))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": port}
    assert checks.parse_flags(container["args"])["--metrics-address"] == f":{port}"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], ports.get(get["port"], get["port"])) == (path, port)


@pytest.mark.parametrize(("kind", "name", "port"), WORKLOADS)
def test_container_is_locked_down(objects, kind, name, port):
    sec = _container(r.one(objects, kind, name))["securityContext"]
    assert sec["allowPrivilegeEscalation"] is False
    assert sec["readOnlyRootFilesystem"] is True
    assert sec["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in sec


@pytest.mark.parametrize(("kind", "name", "port"), WORKLOADS)
def test_requests_and_limits_are_set(objects, kind, name, port):
    resources = _container(r.one(objects, kind, name))["resources"]
    for field in ("requests", "limits"):
        assert set(resources[field]) == {"cpu", "memory"}
        assert all(parse_quantity(v) > 0 for v in resources[field].values())


@pytest.mark.parametrize(("kind", "name", "port"), WORKLOADS)
def test_env_references_in_args_are_defined(objects, kind, name, port):
    container = _container(r.one(objects, kind, name))
    defined = {e["name"] for e in container.get("env", [])}
    assert checks.env_references(container) <= defined


def test_both_run_the_same_pinned_image(objects):
    images = {_container(o)["image"] for o in objects if o["kind"] in {"DaemonSet", "Deployment"}}
    assert len(images) == 1
    assert ":" in next(iter(images)).rpartition("/")[2], "the image is pinned to a tag"


def test_env_reference_helper():
    container = {"command": ["x"], "args": ["--a=$(ONE)", "$(TWO)/x", "$$(NOT)"]}
    assert checks.env_references(container) == {"ONE", "TWO"}
    assert checks.parse_flags(["run", "--a=1", "--b", "pos"]) == {"--a": "1", "--b": None}
