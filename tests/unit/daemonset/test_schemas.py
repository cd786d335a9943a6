"""Every rendered object and every example validates offline against the Kubernetes schemas."""

from __future__ import annotations

import kubernetes_validate
import pytest

from agent.quantity import parse_quantity
from tests.builders import manifests as checks
from tests.builders import render as r

K8S_VERSION = "1.30"
CRD_GROUPS = {"topology.node.k8s.io", "scheduling.x-k8s.io", "scheduling.gputopo.io"}

SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["minMember"],
            "properties": {
                "minMember": {"type": "integer", "format": "int32", "minimum": 1},
                "minResources": {
                    "type": "object",
                    "additionalProperties": {"x-kubernetes-int-or-string": True},
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "note": {"type": "string", "nullable": True},
            },
        }
    },
}
CRD = {
    "metadata": {"name": "widgets.example.x-k8s.io"},
    "spec": {
        "group": "example.x-k8s.io",
        "names": {"kind": "Widget", "plural": "widgets"},
        "versions": [{"name": "v1", "schema": {"openAPIV3Schema": SCHEMA}}],
    },
}


def _is_custom(obj: r.Obj) -> bool:
    return str(obj["apiVersion"]).rpartition("/")[0] in CRD_GROUPS


def _k8s_problem(obj: r.Obj) -> str | None:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = ".".join(str(p) for p in err.path)
        return f"{r.key(obj)} at {path}: {err.message}"
    return None


def _all_objects(objects: tuple[r.Obj, ...], examples: dict[str, list[r.Obj]]) -> list[r.Obj]:
    return [*objects, *(o for docs in examples.values() for o in docs)]


def test_rendered_builtin_objects_validate_strictly(objects):
    builtin = [o for o in objects if not _is_custom(o)]
    assert len(builtin) >= 11
    assert [p for o in builtin if (p := _k8s_problem(o))] == []


def test_example_builtin_objects_validate_strictly(examples):
    builtin = [o for docs in examples.values() for o in docs if not _is_custom(o)]
    assert len(builtin) >= 4
    assert [p for o in builtin if (p := _k8s_problem(o))] == []


def test_strict_validation_catches_a_misspelt_field(objects):
    daemonset = r.one(objects, "DaemonSet", "gputopo-agent")
    broken = {**daemonset, "spec": {**daemonset["spec"], "updateStrategyy": {}}}
    problem = _k8s_problem(broken)
    assert problem is not None
    assert "updateStrategyy" in problem


def test_custom_objects_validate_against_our_crds(objects, examples, crds):
    custom = [o for o in _all_objects(objects, examples) if _is_custom(o)]
    assert custom, "the gang example has a PodGroup"
    served = [o for o in custom if checks.crd_for(crds, o) is not None]
    if not served:
        pytest.skip(
            "no CRD for the custom objects in the tree yet (daemonset/crds/ comes from other parts)"
        )
    problems = {
        r.key(o): checks.crd_problems(crd, o) for o in custom if (crd := checks.crd_for(crds, o))
    }
    assert {k: v for k, v in problems.items() if v} == {}


def test_nrt_crd_carries_the_api_approved_annotation(crds):
    """A CRD in a *.k8s.io group without it is rejected by the API server."""
    nrt = [c for c in crds if c["spec"]["group"] == "topology.node.k8s.io"]
    if not nrt:
        pytest.skip("daemonset/crds/noderesourcetopology.yaml is not in the tree yet")
    annotations = nrt[0]["metadata"].get("annotations") or {}
    assert annotations.get("api-approved.kubernetes.io")


def test_every_resource_quantity_parses_and_requests_fit_limits(objects, examples):
    seen = 0
    for obj in _all_objects(objects, examples):
        for spec in r.pod_specs(obj):
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                resources = container.get("resources") or {}
                requests = resources.get("requests") or {}
                limits = resources.get("limits") or {}
                for value in [*requests.values(), *limits.values()]:
                    parse_quantity(value)
                    seen += 1
                over = [
                    n
                    for n in requests
                    if n in limits and parse_quantity(requests[n]) > parse_quantity(limits[n])
                ]
                assert over == [], f"{r.key(obj)} {container['name']}: requests above limits"
    assert seen >= 20


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("500m", "0.5", id="milli"),
        pytest.param("128Mi", str(128 * 2**20), id="binary"),
        pytest.param("1", "1", id="plain"),
        pytest.param("1.5G", "1500000000", id="decimal suffix"),
        pytest.param("2e3", "2000", id="exponent"),
    ],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == parse_quantity(value)
    assert str(parse_quantity(text)) == str(parse_quantity(value))


@pytest.mark.parametrize("text", ["x1", "1 Gi", "1GiB", "", "1.2.3"])
def test_parse_quantity_rejects_junk(text):
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


def _widget(spec: r.Obj) -> r.Obj:
    return {
        "apiVersion": "example.x-k8s.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"minMember": 2, "minResources": {"nvidia.com/gpu": 8, "cpu": "4"}}, [], id="valid"
        ),
        pytest.param(
            {"minMember": 2, "extra": {"any": {"thing": 1}}, "note": None},
            [],
            id="preserve and nullable",
        ),
        pytest.param(
            {"minMember": 2, "minmember": 3}, ["'minmember' was unexpected"], id="unknown field"
        ),
        pytest.param({}, ["'minMember' is a required property"], id="missing required"),
        pytest.param({"minMember": "4"}, ["is not of type 'integer'"], id="wrong type"),
        pytest.param({"minMember": 0}, ["less than the minimum"], id="below minimum"),
        pytest.param(
            {"minMember": 1, "minResources": {"cpu": [1]}},
            ["is not valid under any"],
            id="int-or-string",
        ),
    ],
)
def test_crd_validator(spec, expected):
    problems = checks.crd_problems(CRD, _widget(spec))
    assert len(problems) == len(expected)
    assert all(want in got for want, got in zip(expected, problems, strict=True))


def test_crd_validator_rejects_unknown_top_level_fields():
    obj = {**_widget({"minMember": 1}), "status2": {}}
    assert checks.crd_problems(CRD, obj) == [
        "<root>: Additional properties are not allowed ('status2' was unexpected)"
    ]
    assert checks.crd_for([CRD], obj) is CRD
    assert checks.crd_for([CRD], {**obj, "kind": "Gadget"}) is None
