"""`tests.fakeapi.schema`: CRD validation rules (`x-kubernetes-validations`) as the API server
words them, and what the fake does not model."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.fakeapi import make_gadget_crd
from tests.fakeapi.resources import crd_problems
from tests.fakeapi.schema import prune


def _schema(rules: list[dict[str, Any]]) -> dict[str, Any]:
    limits = {
        "type": "object",
        "additionalProperties": {"type": "integer"},
        "x-kubernetes-validations": rules,
    }
    return {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "limits": limits}}}}  # fmt: skip


def test_a_false_rule_is_one_problem_at_its_field_with_its_message():
    schema = _schema([{"rule": "self.all(k, k != 'gpu')", "message": "say nvidia.com/gpu"}])
    pruned, problems = prune({"spec": {"limits": {"gpu": 1, "cpu": 2}}}, schema)
    assert problems == ['spec.limits: Invalid value: "object": say nvidia.com/gpu']
    assert pruned == {"spec": {"limits": {"gpu": 1, "cpu": 2}}}
    assert prune({"spec": {"limits": {"cpu": 2}}}, schema)[1] == []


def test_a_rule_without_a_message_names_the_rule():
    schema = _schema([{"rule": "size(self) < 2"}])
    _, problems = prune({"spec": {"limits": {"a": 1, "b": 2}}}, schema)
    assert problems == ['spec.limits: Invalid value: "object": failed rule: size(self) < 2']


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param({"rule": "self == oldSelf"}, id="transition rule"),
        pytest.param({"rule": "true", "messageExpression": "'x'"}, id="messageExpression"),
    ],
)
def test_rules_the_fake_does_not_model_say_so(rule):
    with pytest.raises(NotImplementedError, match="not modelled"):
        prune({"spec": {"limits": {}}}, _schema([rule]))


def test_a_crd_whose_rule_does_not_compile_is_refused():
    (problem,) = crd_problems(make_gadget_crd(_schema([{"rule": "self.all(k, "}])))
    assert problem.startswith(
        "spec.versions[v1].schema.openAPIV3Schema.properties[spec].properties[limits]"
        ".x-kubernetes-validations: Invalid value: 'self.all(k, ': "
    )
