"""The Helm chart in daemonset/helm/gputopo/, with the real helm (scripts/helm/build.sh): its
default render is the manifests of daemonset/ object for object, each optional part renders as
its folder in daemonset/optional/ does, its CRDs and copied files are daemonset/'s, `helm lint`
passes, values.schema.json names a misspelt key, and the values admins set reach the objects."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli.config import build_parser, load
from tests.builders import helm as h
from tests.builders import manifests as checks
from tests.builders import render as r

SCHEMA = json.loads((h.CHART / "values.schema.json").read_text(encoding="utf-8"))

# Each entry of daemonset/optional/ and the values that turn it on in the chart. A new entry
# fails test_every_optional_part_has_a_value until it is wired into the chart and listed here.
OPTIONAL_VALUES: dict[str, dict[str, Any]] = {
    "mps": {"mps": {"enabled": True}},
    "admission": {"admission": {"enabled": True}},
    "queue-label": {"queueLabelPolicy": {"enabled": True}},
    "monitoring": {
        "monitoring": {
            "podMonitors": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "dashboard": {"enabled": True},
        }
    },
    "dra": {"dra": {"enabled": True}},
    "cdi": {"agent": {"cdi": {"enabled": True}}},
    "kubelet-config": {"agent": {"kubeletConfig": {"path": "/var/lib/kubelet/config.yaml"}}},
}
# Not a part of the install: CRDs are the chart's crds/ (`helm install --skip-crds` keeps another
# project's NodeResourceTopology CRD, as this overlay of daemonset/crds/ does).
NOT_INSTALL_PARTS = {"upstream-nrt-crd"}


@pytest.fixture(scope="module")
def helm() -> str:
    binary, why = h.helm_binary()
    if binary is None:
        pytest.skip(why)
    return binary


@pytest.fixture(scope="module")
def default_render(helm: str) -> list[r.Obj]:
    return h.template(helm)


def _kustomized(folder: Path) -> list[r.Obj]:
    if r.kubectl_path() is None:
        pytest.skip("kubectl is not installed: kustomizations cannot be rendered")
    return r.render_with_kubectl(str(r.kubectl_path()), folder)


def _optional_manifests(source: Path) -> list[r.Obj]:
    """An optional part's objects: its files as written, and what its kustomization generates
    (the dashboard ConfigMap). Not the kustomized files themselves: kustomize re-folds a folded
    scalar with more-indented lines (a CEL expression) with a blank line between them."""
    if source.is_file():
        return r.load_file(source)
    written = [
        o for rel in r.kustomization(source).get("resources", []) for o in r.load_file(source / rel)
    ]
    return written + h.added(_kustomized(source), written)


def _with(helm: str, values: Mapping[str, Any]) -> list[r.Obj]:
    return h.template(helm, values)


def _agent_pod(objects: list[r.Obj]) -> r.Obj:
    return r.pod_specs(r.one(objects, "DaemonSet", "gputopo-agent"))[0]


# -- one source of truth -----------------------------------------------------------------------


def test_the_default_render_is_the_manifests_object_for_object(default_render):
    manifests = h.by_key(r.render().objects)  # kubectl kustomize, or the fallback renderer
    chart = h.by_key(default_render)
    assert sorted(chart) == sorted(manifests)
    different = [k for k in manifests if chart[k] != manifests[k]]
    assert different == [], f"the chart renders these unlike daemonset/: {different}"


def test_the_charts_crds_are_daemonset_crds_byte_for_byte():
    sources = {p.name for p in r.CRDS.glob("*.yaml")} - {"kustomization.yaml"}
    copies = {p.name for p in (h.CHART / "crds").glob("*")}
    assert copies == sources, "run scripts/helm/sync.sh"
    assert all((h.CHART / "crds" / n).read_bytes() == (r.CRDS / n).read_bytes() for n in sources)


def test_the_files_the_chart_includes_are_daemonset_optional_byte_for_byte():
    copies = sorted(p for p in (h.CHART / "files" / "optional").rglob("*") if p.is_file())
    assert copies, "files/optional/ is empty: run scripts/helm/sync.sh"
    stale = [
        str(p.relative_to(h.CHART))
        for p in copies
        if p.read_bytes()
        != (r.OPTIONAL / p.relative_to(h.CHART / "files" / "optional")).read_bytes()
    ]
    assert stale == [], f"copies unlike their source (run scripts/helm/sync.sh): {stale}"


def test_every_optional_part_has_a_value():
    entries = {p.name for p in r.OPTIONAL.iterdir()} - NOT_INSTALL_PARTS
    unwired = sorted(entries - set(OPTIONAL_VALUES))
    assert unwired == [], (
        f"daemonset/optional/ has {unwired}, which the chart does not install: add it to "
        "scripts/helm/sync.sh and templates/optional.yaml (or a template), a value in "
        "values.yaml and values.schema.json, and an entry in OPTIONAL_VALUES"
    )


@pytest.mark.parametrize(
    "part",
    [
        pytest.param("mps", id="MPS DaemonSet"),
        pytest.param("admission", id="admission policies"),
        pytest.param("queue-label", id="queue-label policy"),
        pytest.param("monitoring", id="PodMonitors, PrometheusRule, dashboard"),
        pytest.param("dra", id="DRA DeviceClasses and RBAC"),
    ],
)
def test_each_optional_part_renders_as_its_manifests(helm, default_render, part):
    source = r.OPTIONAL / part
    manifests = _optional_manifests(source)
    chart = h.added(_with(helm, OPTIONAL_VALUES[part]), default_render)
    assert h.by_key(chart) == h.by_key(manifests)


@pytest.mark.parametrize(
    ("part", "component"),
    [
        pytest.param("cdi", r.OPTIONAL / "cdi", id="cdi-cri"),
        pytest.param("kubelet-config", r.OPTIONAL / "kubelet-config" / "kubeadm", id="kubeadm"),
        pytest.param("dra", r.OPTIONAL / "dra", id="DRA driver"),
    ],
)
def test_each_agent_component_renders_as_its_overlay(helm, part, component):
    if r.kubectl_path() is None:
        pytest.skip("kubectl is not installed: components cannot be rendered")
    overlay = r.render_with_components(component)
    chart = _with(helm, OPTIONAL_VALUES[part])
    assert _agent_pod(chart) == _agent_pod(overlay)


# -- helm lint and the schema -----------------------------------------------------------------


def _every_part_on() -> dict[str, Any]:
    values: dict[str, Any] = {}
    for on in OPTIONAL_VALUES.values():
        values = h.merged(values, on)
    return values


@pytest.mark.parametrize("every_part", [False, True], ids=["defaults", "every optional part"])
def test_helm_lint_passes_strict(helm, every_part):
    values = ["--values", str(h.values_file(_every_part_on()))] if every_part else []
    done = h.helm(helm, "lint", "--strict", str(h.CHART), *values, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(
    ("values", "named"),
    [
        pytest.param({"scheduler": {"replica": 3}}, "replica", id="scheduler.replica"),
        pytest.param({"agent": {"tolerationz": []}}, "tolerationz", id="agent.tolerationz"),
        pytest.param({"imagePullSecret": [{"name": "x"}]}, "imagePullSecret", id="top level"),
        pytest.param(
            {"agent": {"config": {"sharng": {"timeSlicing": {}}}}}, "sharng", id="agent.config"
        ),
        pytest.param({"mps": {"enabeld": True}}, "enabeld", id="mps.enabeld"),
    ],
)
def test_a_misspelt_value_fails_naming_the_key(helm, values, named):
    done = h.helm(helm, "template", "gputopo", str(h.CHART), "--values",
                  str(h.values_file(values)), check=False)  # fmt: skip
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert f"'{named}'" in done.stderr or f'"{named}"' in done.stderr, done.stderr


def test_a_value_of_the_wrong_kind_fails(helm):
    done = h.helm(helm, "template", "gputopo", str(h.CHART),
                  "--set", "scheduler.replicas=two", check=False)  # fmt: skip
    assert done.returncode != 0
    assert "replicas" in done.stderr, done.stderr


def test_the_schema_knows_every_key_of_the_agents_config_file():
    flags = {
        opt.lstrip("-")
        for action in build_parser()._actions
        for opt in action.option_strings
        if opt.startswith("--") and opt not in ("--help", "--config", "--kubeconfig")
    }
    camel = {w.split("-")[0] + "".join(p.title() for p in w.split("-")[1:]) for w in flags}
    keys = set(SCHEMA["properties"]["agent"]["properties"]["config"]["properties"])
    assert keys == camel | {"version", "flags", "sharing", "resources", "imex"}


# -- values -------------------------------------------------------------------------------------


def test_scheduler_replicas_and_leader_election(helm):
    objects = _with(helm, {"scheduler": {"replicas": 1, "leaderElection": {"enabled": False}}})
    deployment = r.one(objects, "Deployment", "gputopo-scheduler")
    args = checks.parse_flags(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert deployment["spec"]["replicas"] == 1
    assert args["--leader-elect"] == "false"
    assert args["--leader-elect-namespace"] == "$(POD_NAMESPACE)"  # the share locks' namespace


def test_node_selection_tolerations_and_resources(helm):
    terms = [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
    objects = _with(helm, {"agent": {
        "gpuNodeSelectorTerms": terms, "nodeSelector": {"pool": "a100"},
        "tolerations": [{"operator": "Exists"}],
        # Helm merges maps into the defaults: null drops a default key
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": None},
    }})  # fmt: skip
    pod = _agent_pod(objects)
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == terms
    assert pod["nodeSelector"] == {"pool": "a100"}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}}


def test_image_and_pull_secrets_reach_every_pod(helm):
    objects = _with(helm, {
        "image": {"repository": "registry.example/gputopo", "tag": "1.2.3"},
        "imagePullSecrets": [{"name": "regcred"}], "mps": {"enabled": True},
    })  # fmt: skip
    pods = [spec for obj in objects for spec in r.pod_specs(obj)]
    assert len(pods) == 3
    for pod in pods:
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert [c["image"] for c in pod["containers"]] == ["registry.example/gputopo:1.2.3"]


@pytest.mark.parametrize(
    ("config", "mig", "sharing"),
    [
        pytest.param({"sharing": {"timeSlicing": {"resources": [
            {"name": "nvidia.com/gpu", "replicas": 4}]}}}, "mixed", "timeSlicing",
            id="time-slicing"),
        pytest.param({"sharing": {"mps": {"resources": [
            {"name": "nvidia.com/gpu", "replicas": 2}]}}}, "mixed", "mps", id="MPS"),
        pytest.param({"flags": {"migStrategy": "single"}}, "single", None, id="MIG single"),
    ],
)  # fmt: skip
def test_the_agent_config_renders_into_a_file_the_agent_accepts(
    helm, tmp_path, config, mig, sharing
):
    objects = _with(helm, {"agent": {"config": config}})
    text = r.one(objects, "ConfigMap", "gputopo-agent-config")["data"]["agent.yaml"]
    assert yaml.safe_load(text) == {"version": "v1", "flags": {"migStrategy": "mixed"}, **config}
    path = tmp_path / "agent.yaml"
    path.write_text(text, encoding="utf-8")
    loaded = load(["--node-name=n1", "--nvml-fixture=dgx-h100", "--allow-fake-gpus"], {}, path)
    assert loaded.mig_strategy.value == mig
    shared = loaded.plugin.time_slicing
    assert (shared.sharing.value if shared.resources else None) == sharing


def test_scheduler_config_values_merge_into_the_shipped_defaults(helm):
    weights = {"scoring": {"weights": {"topology": 8}}}
    objects = _with(helm, {"scheduler": {"schedulerName": "gpu-sched", "config": weights}})
    doc = yaml.safe_load(
        r.one(objects, "ConfigMap", "gputopo-scheduler-config")["data"]["scheduler.yaml"]
    )
    assert doc["schedulerName"] == "gpu-sched"
    assert doc["scoring"]["weights"] == {
        "fragmentation": 10, "topology": 8, "spreadOnCpuNodes": 1, "gpuAvoidance": 1,
    }  # fmt: skip
    agent_args = checks.parse_flags(_agent_pod(objects)["containers"][0]["args"])
    assert agent_args["--share-scheduler-name"] == "gpu-sched"


def test_other_names_and_namespaces_reach_every_object_and_policy(helm):
    values = {"namePrefix": "gt", "namespaces": {"agent": "gt-node", "scheduler": "gt-sched"},
              "admission": {"enabled": True}, "mps": {"enabled": True}}  # fmt: skip
    objects = _with(helm, values)
    names = {o["metadata"]["name"] for o in objects if o["kind"] != "Namespace"}
    assert all(n.startswith("gt-") for n in names), sorted(names)
    spaces = {o["metadata"].get("namespace") for o in objects} - {None}
    assert spaces == {"gt-node", "gt-sched"}
    text = yaml.safe_dump_all(objects)
    assert "system:serviceaccount:gt-node:gt-agent" in text
    assert "system:serviceaccount:gt-sched:gt-scheduler" in text
    assert "gputopo-agent:gputopo-agent" not in text
    binding = r.one(objects, "ValidatingAdmissionPolicyBinding", "gt-agent-own-node")
    assert binding["spec"]["policyName"] == "gt-agent-own-node"
    agent = r.pod_specs(r.one(objects, "DaemonSet", "gt-agent"))[0]
    assert agent["serviceAccountName"] == "gt-agent"
    assert (
        checks.parse_flags(agent["containers"][0]["args"])["--share-lock-namespace"] == "gt-sched"
    )


def test_dra_gpus_and_other_names_reach_the_agent_and_its_dra_binding(helm):
    values = {"namePrefix": "gt", "namespaces": {"agent": "gt-node"},
              "dra": {"enabled": True, "gpus": "0,GPU-1234"}}  # fmt: skip
    objects = _with(helm, values)
    agent = r.pod_specs(r.one(objects, "DaemonSet", "gt-agent"))[0]
    assert checks.parse_flags(agent["containers"][0]["args"])["--dra-gpus"] == "0,GPU-1234"
    binding = r.one(objects, "ClusterRoleBinding", "gt-agent-dra")
    assert binding["roleRef"]["name"] == "gt-agent-dra"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gt-agent", "namespace": "gt-node"}
    ]
    r.one(objects, "ClusterRole", "gt-agent-dra")


def _mps_sharing(*devices: Any) -> dict[str, Any]:
    """sharing.mps with one renamed resource per `devices` entry (None: every device)."""
    resources = [
        {"name": "nvidia.com/gpu", "replicas": 2, "rename": f"nvidia.com/gpu-shared-{i}"}
        | ({} if d is None else {"devices": d})
        for i, d in enumerate(devices)
    ]
    return {"agent": {"config": {"sharing": {"mps": {"resources": resources}}}}}


@pytest.mark.parametrize(
    ("values", "gpus"),
    [
        pytest.param({}, "all", id="no sharing.mps: all"),
        pytest.param(_mps_sharing(None), "all", id="every device shared"),
        pytest.param(_mps_sharing([0, "GPU-ab"], [1, 0]), "0,GPU-ab,1", id="the devices lists"),
        pytest.param(
            h.merged(_mps_sharing([6, 7]), {"dra": {"enabled": True, "gpus": "6,7"}}),
            "6,7",
            id="the DRA GPUs' shares: the same list",
        ),
        pytest.param(
            h.merged(_mps_sharing(None), {"mps": {"gpus": "2,3"}}), "2,3", id="set: as set"
        ),
    ],
)
def test_the_mps_gpus_are_those_sharing_mps_shares_unless_set(helm, values, gpus):
    objects = _with(helm, h.merged({"mps": {"enabled": True}}, values))
    pod = r.pod_specs(r.one(objects, "DaemonSet", "gputopo-mps"))[0]
    assert checks.parse_flags(pod["containers"][0]["args"])["--gpus"] == gpus


def test_the_extended_resource_device_class_renders_as_its_part_and_only_with_every_gpu(helm):
    on = {"dra": {"enabled": True, "extendedResource": True}}
    chart = h.added(_with(helm, on), _with(helm, OPTIONAL_VALUES["dra"]))
    manifests = r.load_file(r.OPTIONAL / "dra" / "extended-resource" / "deviceclass.yaml")
    assert h.by_key(chart) == h.by_key(manifests)
    some = h.merged(on, {"dra": {"gpus": "0,1"}})
    done = h.helm(helm, "template", "gputopo", str(h.CHART), "--values", str(h.values_file(some)),
                  check=False)  # fmt: skip
    assert done.returncode != 0
    assert "dra.extendedResource needs dra.enabled and dra.gpus: all" in done.stderr


def test_cdi_and_dra_together_give_each_volume_a_name_of_its_own(helm):
    """Both parts mount the node's /var/run/cdi (the device plugin's read-only, the DRA driver's
    writable under the host root): in the chart and in the two kustomize components together,
    every volume name is unique (the API server refuses a pod with two of one name)."""
    chart = _agent_pod(_with(helm, h.merged(OPTIONAL_VALUES["cdi"], OPTIONAL_VALUES["dra"])))
    optional = r.DAEMONSET / "optional"
    manifests = _agent_pod(r.render_with_components(optional / "cdi", optional / "dra"))
    for pod in (chart, manifests):
        names = [v["name"] for v in pod["volumes"]]
        assert len(names) == len(set(names)), names
        mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
        assert (mounts["/var/run/cdi"], mounts["/host/var/run/cdi"]) == ("cdi-run", "dra-cdi-specs")


def test_the_optional_parts_are_off_by_default(default_render):
    kinds = {o["kind"] for o in default_render}
    assert kinds.isdisjoint({"PodMonitor", "PrometheusRule", "ValidatingAdmissionPolicy"})
    assert [o["metadata"]["name"] for o in r.by_kind(default_render, "DaemonSet")] == [
        "gputopo-agent"
    ]
