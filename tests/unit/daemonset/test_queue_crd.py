"""daemonset/crds/queue.yaml: the names DESIGN §10 gives, and its schema as an API server applies it
(the fake API server with the shipped CRD registered)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiException, CustomObjectsApi

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
