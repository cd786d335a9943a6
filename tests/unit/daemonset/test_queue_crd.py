"""daemonset/crds/queue.yaml: the names DESIGN §10 gives, and its schema as an API server applies it
(the fake API server with the shipped CRD registered)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cel
import pytest
from kubernetes.client import ApiException, CustomObjectsApi

from agent.resource_names import MODEL_KEY_PATTERN, model_key_problem
from tests.builders import render as r
from tests.builders.fakeapi import status_body
from tests.fakeapi import FakeApiServer
from tests.fakeapi.resources import crd_problems

QUEUES = ("scheduling.gputopo.io", "v1alpha1", "queues")
CRD = r.DAEMONSET / "crds" / "queue.yaml"


def _crd() -> dict[str, Any]:
    (crd,) = r.load_file(CRD)
    return crd


@pytest.fixture
def custom() -> Iterator[CustomObjectsApi]:
    with FakeApiServer(install_crds=False) as fake:
        fake.register_crd(_crd())
        api = fake.api_client()
        yield CustomObjectsApi(api)
        api.close()  # type: ignore[no-untyped-call]


def _queue(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gputopo.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "q"},
        "spec": spec,
    }


def test_names_scope_and_version():
    crd = _crd()
    assert crd_problems(crd) == []
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"]) == (
        "scheduling.gputopo.io",
        "Cluster",
        "Queue",
    )
    assert spec["names"]["shortNames"] == ["q"]
    (version,) = spec["versions"]
    assert (version["name"], version["subresources"]) == ("v1alpha1", {"status": {}})
    fields = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(fields["spec"]["properties"]) == {
        "parent",
        "min",
        "max",
        "weight",
        "paused",
        "namespaces",
    }
    assert set(fields["status"]["properties"]) == {
        "used",
        "borrowed",
        "pending",
        "fairShare",
        "conditions",
    }


def test_print_columns_show_gpus():
    (version,) = _crd()["spec"]["versions"]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    shown = [n for n, c in columns.items() if not c.get("priority")]
    assert shown == ["Min", "Max", "Used", "Pending", "Age"]
    assert {columns[n]["jsonPath"] for n in ("Min", "Max", "Used", "Pending")} == {
        r".spec.min.nvidia\.com/gpu",
        r".spec.max.nvidia\.com/gpu",
        r".status.used.nvidia\.com/gpu",
        r".status.pending.resources.nvidia\.com/gpu",
    }


def test_weight_defaults_to_one_and_quantities_keep_their_form(custom):
    spec = {"min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": "16", "cpu": "500m"}}
    made = custom.create_cluster_custom_object(*QUEUES, _queue(spec))
    assert made["spec"] == {**spec, "weight": 1}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({"max": {"nvidia.com/gpu": "lots"}}, "spec.max.nvidia.com/gpu", id="quantity"),
        pytest.param({"min": {"nvidia.com/gpu": 1.5}}, "spec.min.nvidia.com/gpu", id="float"),
        pytest.param({"weight": 0}, "spec.weight", id="weight below 1"),
        pytest.param({"paused": "yes"}, "spec.paused", id="paused not a bool"),
        pytest.param({"namespaces": "team-a"}, "spec.namespaces", id="namespaces not a list"),
    ],
)
def test_malformed_queues_are_422(custom, spec, field):
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(*QUEUES, _queue(spec))
    assert err.value.status == 422
    assert field in status_body(err.value)["message"]


def test_status_written_by_the_scheduler_fits_and_conditions_are_complete(custom):
    custom.create_cluster_custom_object(*QUEUES, _queue({"max": {"nvidia.com/gpu": 4}}))
    condition = {
        "type": "Valid",
        "status": "False",
        "reason": "UnknownParent",
        "message": "parent org does not exist",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    status = {
        "used": {"nvidia.com/gpu": 4},
        "borrowed": {"nvidia.com/gpu": 4},
        "pending": {"units": 2, "resources": {"nvidia.com/gpu": 8}},
        "fairShare": {"nvidia.com/gpu": "4"},
        "conditions": [condition],
    }
    custom.patch_cluster_custom_object_status(*QUEUES, "q", {"status": status})
    assert custom.get_cluster_custom_object(*QUEUES, "q")["status"] == status
    incomplete = {"type": "Valid", "status": "False"}
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object_status(
            *QUEUES, "q", {"status": {"conditions": [incomplete]}}
        )
    assert err.value.status == 422


def _key_rule(field: str) -> dict[str, Any]:
    (version,) = _crd()["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    (rule,) = spec[field]["x-kubernetes-validations"]
    return rule


def test_the_key_rule_is_the_schedulers_pattern_and_within_the_cost_budget():
    """One pattern, two engines: the CRD's rule is built on `MODEL_KEY_PATTERN` verbatim; the
    maps are bounded (`maxProperties`) so the API server's cost estimate is bounded."""
    (version,) = _crd()["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for field in ("min", "max"):
        assert _key_rule(field)["rule"] == (
            f"self.all(k, !k.contains('@') || k.matches('^({MODEL_KEY_PATTERN})$'))"
        )
        assert spec[field]["maxProperties"] == 128
    assert [c for c in "\\'" if c in MODEL_KEY_PATTERN] == []  # no escaping to differ


KEYS = [
    pytest.param("nvidia.com/gpu@NVIDIA-H100-80GB-HBM3", id="the key kubectl gputopo nodes shows"),
    pytest.param("nvidia.com/gpu@NVIDIA H100 80GB HBM3", id="the product as NVML names it"),
    pytest.param("nvidia.com/mig-1g.10gb@NVIDIA-A100-SXM4-40GB", id="MIG profile"),
    pytest.param("nvidia.com/mig-1g.10gb.me@A100", id="MIG profile with media extensions"),
    pytest.param("nvidia.com/mig-@A100", id="MIG prefix alone"),
    pytest.param("nvidia.com/gpu", id="plain GPU"),
    pytest.param("cpu", id="plain cpu"),
    pytest.param("nvidia.com/gpu@", id="no model"),
    pytest.param("nvidia.com/gpu@-H100", id="model starts with -"),
    pytest.param("nvidia.com/gpu@H100.", id="model ends with ."),
    pytest.param("nvidia.com/gpu@H100@2", id="two @"),
    pytest.param("nvidia.com/gpu@" + "A" * 63, id="model of 63 characters"),
    pytest.param("nvidia.com/gpu@" + "A" * 64, id="model of 64 characters"),
    pytest.param("nvidia.com/gpu@H100\n", id="trailing newline"),
    pytest.param("nvidia.com/gpu@H100_x", id="underscore inside"),
    pytest.param("memory@H100", id="resource that takes no model"),
    pytest.param("nvidia.com/gpus@H100", id="near miss of the resource"),
    pytest.param("nvidiaXcom/gpu@H100", id="dot is literal"),
    pytest.param("nvidia.com/gpu@Tesla-T4é", id="non-ASCII"),
]


@pytest.mark.parametrize("key", KEYS)
def test_the_crd_rule_and_the_scheduler_agree_on_each_key(key):
    rule = _key_rule("min")["rule"]
    crd_accepts = cel.evaluate(rule, {"self": {key: 1}})
    scheduler_accepts = model_key_problem(key) is None
    assert crd_accepts is scheduler_accepts


def test_the_keys_table_has_both_verdicts():
    verdicts = {model_key_problem(p.values[0]) is None for p in KEYS}
    assert verdicts == {True, False}


@pytest.mark.parametrize("field", ["min", "max"])
def test_a_malformed_model_key_is_refused_with_how_to_write_it(custom, field):
    spec = {field: {"nvidia.com/gpu@NVIDIA H100 80GB HBM3": 4, "cpu": "8"}}
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(*QUEUES, _queue(spec))
    assert err.value.status == 422
    message = status_body(err.value)["message"]
    assert f'spec.{field}: Invalid value: "object": a key naming a GPU model is' in message
    assert "kubectl gputopo nodes prints each model's key" in message
    good = {field: {"nvidia.com/gpu@NVIDIA-H100-80GB-HBM3": 4, "cpu": "8"}}
    assert custom.create_cluster_custom_object(*QUEUES, _queue(good))["spec"][field] == good[field]
