"""daemonset/optional/dra/: the DRA driver's component with the admission policy that holds each
agent to its own node's ResourceSlices, and beside it the opt-in DeviceClass that maps the
extended resource nvidia.com/gpu to the driver's whole GPUs (KEP-5004)."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from agent.dra import DRIVER
from tests.builders import manifests as checks
from tests.builders import rbac
from tests.builders import render as r

DRA = r.OPTIONAL / "dra"
EXTENDED = DRA / "extended-resource"


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = r.kubectl_path()
    if path is None:
        pytest.skip("kubectl is not installed: components cannot be rendered")
    return str(path)


def _classes(objects: list[r.Obj]) -> dict[str, r.Obj]:
    return {o["metadata"]["name"]: o for o in r.by_kind(objects, "DeviceClass")}


def test_the_dra_component_maps_no_extended_resource(kubectl):
    classes = _classes(r.render_with_components(DRA))
    assert sorted(classes) == ["gpu-share.gputopo.io", "gpu.gputopo.io", "mig.gputopo.io"]
    assert all("extendedResourceName" not in c["spec"] for c in classes.values())


def test_the_extended_resource_part_maps_nvidia_gpu_to_whole_unshared_gpus(kubectl):
    classes = _classes(r.render_with_components(DRA, EXTENDED))
    extended = classes.pop("gpu-extended.gputopo.io")
    assert extended["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    # the devices of gpu.gputopo.io: a pod asking one nvidia.com/gpu gets one whole GPU
    assert extended["spec"]["selectors"] == classes["gpu.gputopo.io"]["spec"]["selectors"]
    assert [c for c in classes.values() if "extendedResourceName" in c["spec"]] == []


def test_its_comment_says_not_beside_the_device_plugins_nvidia_gpu():
    text = (EXTENDED / "deviceclass.yaml").read_text(encoding="utf-8")
    assert "Do not use it on nodes where the device plugin also serves nvidia.com/gpu" in text
    assert "DRAExtendedResource" in text


POLICY = "gputopo-agent-dra-slices"


@pytest.fixture(scope="module")
def slice_policy() -> list[r.Obj]:
    return r.load_file(DRA / "slice-policy.yaml")


def test_the_component_holds_the_agent_to_its_own_nodes_slices(kubectl):
    rendered = r.render_with_components(DRA)
    policy = r.one(rendered, "ValidatingAdmissionPolicy", POLICY)
    binding = r.one(rendered, "ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_the_slice_policy_matches_every_slice_write_the_dra_role_grants(objects, slice_policy):
    policy = r.one(slice_policy, "ValidatingAdmissionPolicy", POLICY)
    role = r.one(r.load_file(DRA / "dra.yaml"), "ClusterRole", "gputopo-agent-dra")
    operations = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE"}
    granted = {
        operations[verb]
        for rule in role["rules"]
        if "resourceslices" in rule["resources"]
        for verb in rule["verbs"]
        if verb in operations
    }
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["resource.k8s.io"], ["resourceslices"])
    assert set(rule["operations"]) == granted == {"CREATE", "UPDATE", "DELETE"}
    namespace = rbac.service_account_namespace(objects, "gputopo-agent")
    (condition,) = policy["spec"]["matchConditions"]
    assert f"'system:serviceaccount:{namespace}:gputopo-agent'" in condition["expression"]


def test_the_slice_policy_reads_the_node_from_the_token_and_checks_before_and_after(
    slice_policy,
):
    spec = r.one(slice_policy, "ValidatingAdmissionPolicy", POLICY)["spec"]
    text = json.dumps(spec)
    assert "request.userInfo.extra['authentication.kubernetes.io/node-name']" in text
    assert "NODE_NAME" not in text
    checked = [v["expression"] for v in spec["validations"]]
    for side in ("object", "oldObject"):  # CREATE and UPDATE after; UPDATE and DELETE before
        (check,) = [e for e in checked if e.startswith(f"{side} == null")]
        for field in ("spec.nodeName", "spec.pool.name"):
            assert f"{side}.{field} == variables.nodeName" in " ".join(check.split())
        assert f"{side}.spec.driver == '{DRIVER}'" in check
    expressions = [
        *(c["expression"] for c in spec["matchConditions"]),
        *(v["expression"] for v in spec["variables"]),
        *checked,
        *(v["messageExpression"] for v in spec["validations"] if "messageExpression" in v),
    ]
    assert {e: checks.cel_syntax_problems(e) for e in expressions} == {e: [] for e in expressions}
    for obj in slice_policy:
        kubernetes_validate.validate(obj, "1.30", strict=True)


def test_each_class_selects_its_devices_on_any_release_and_mid_upgrade():
    """The classes read the agent's `shared` attribute, never device.allowMultipleAllocations
    (unknown to CEL where the DRAConsumableCapacity gate is off: 1.34 and 1.35 refuse such a
    class), and guard it with has(): a slice an older agent wrote lacks it, and reading a
    missing attribute is an error that fails the whole allocation in kube-scheduler. Evaluated
    with the scheduler's CEL on the agent's own slice."""
    from agent.dra.devices import dra_devices
    from agent.dra.slices import plan_slices
    from scheduler.claims.selectors import Selectors
    from scheduler.claims.slices import parse_slice
    from tests.builders.deviceplugin import make_inventory

    inventory = make_inventory(3)
    (written,) = plan_slices(
        "n1", dra_devices(inventory, range(3), shared={1: 4}), set(), []
    ).create
    older = json.loads(json.dumps(written))  # gpu-2 as an older agent wrote it
    del older["spec"]["devices"][2]["attributes"]["shared"]
    devices = [*parse_slice(written).devices[:2], parse_slice(older).devices[2]]
    for obj in (*r.load_file(DRA / "dra.yaml"), *r.load_file(EXTENDED / "deviceclass.yaml")):
        if obj["kind"] != "DeviceClass":
            continue
        for selector in obj["spec"]["selectors"]:
            assert "allowMultipleAllocations" not in selector["cel"]["expression"]
    classes = {
        o["metadata"]["name"]: o
        for o in r.load_file(DRA / "dra.yaml")
        if o["kind"] == "DeviceClass"
    }
    selectors = Selectors()

    def picked(name: str) -> list[str]:
        expressions = [s["cel"]["expression"] for s in classes[name]["spec"]["selectors"]]
        return [d.name for d in devices if all(selectors.matches(e, d) for e in expressions)]

    assert picked("gpu.gputopo.io") == ["gpu-0", "gpu-2"]
    assert picked("gpu-share.gputopo.io") == ["gpu-1"]
