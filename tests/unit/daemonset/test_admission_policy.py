"""daemonset/optional/admission/: the ValidatingAdmissionPolicies that keep each agent to its own
node's objects and keep gputopo.io/* pod annotations and share Leases to gputopo's
ServiceAccounts parse, validate against the 1.30 schemas, are not in the default install, and
their CEL is well formed and references only fields that exist."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from agent.labels import MANAGED, PREFIXES
from agent.shares import SHARE_LOCK_PREFIX
from tests.builders import manifests as checks
from tests.builders import rbac
from tests.builders import render as r

K8S_VERSION = "1.30"
POLICY_DIR = r.DAEMONSET / "optional" / "admission"
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"

# AdmissionRequest (k8s.io/api/admission/v1) is not a served resource, so no schema file has it:
# its fields, with userInfo from the UserInfo schema.
ADMISSION_REQUEST: dict[str, Any] = {
    "properties": {
        name: {}
        for name in [
            "uid",
            "kind",
            "resource",
            "subResource",
            "requestKind",
            "requestResource",
            "requestSubResource",
            "name",
            "namespace",
            "operation",
            "object",
            "oldObject",
            "dryRun",
            "options",
        ]
    }
    | {
        "userInfo": {"$ref": "#/$defs/io.k8s.api.authentication.v1.UserInfo"},
        "resource": {"properties": {"group": {}, "version": {}, "resource": {}}},
    }
}


@pytest.fixture(scope="module")
def policy_objects() -> tuple[r.Obj, ...]:
    return r.render(POLICY_DIR).objects


@pytest.fixture(scope="module")
def policy(policy_objects) -> r.Obj:
    return r.one(policy_objects, "ValidatingAdmissionPolicy", "gputopo-agent-own-node")


@pytest.fixture(scope="module")
def defs() -> dict[str, Any]:
    folder = SCHEMAS / f"v{K8S_VERSION}.0-local-strict"
    found: dict[str, Any] = json.loads((folder / "_definitions.json").read_text())["$defs"]
    return found


def _expressions(spec: r.Obj) -> list[str]:
    parts = [*spec.get("matchConditions", []), *spec.get("variables", [])]
    parts += spec.get("validations", [])
    found = [p["expression"] for p in parts]
    found += [v["messageExpression"] for v in spec["validations"] if "messageExpression" in v]
    return found


POLICIES = ("gputopo-agent-own-node", "gputopo-pod-annotations", "gputopo-share-leases")


def test_policies_and_bindings_validate_against_the_schemas(policy_objects) -> None:
    assert sorted((o["kind"], o["metadata"]["name"]) for o in policy_objects) == sorted(
        (kind, name)
        for name in POLICIES
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    )
    for obj in policy_objects:
        assert obj["apiVersion"] == "admissionregistration.k8s.io/v1"
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for name in POLICIES:
        binding = r.one(policy_objects, "ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}


def test_policy_is_not_in_the_default_install(objects) -> None:
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def test_cel_is_well_formed(policy_objects) -> None:
    counts = {"gputopo-agent-own-node": 16, "gputopo-pod-annotations": 6, "gputopo-share-leases": 6}
    for name, count in counts.items():
        spec = r.one(policy_objects, "ValidatingAdmissionPolicy", name)["spec"]
        expressions = _expressions(spec)
        assert len(expressions) == count, name
        problems = {e: checks.cel_syntax_problems(e) for e in expressions}
        assert problems == {e: [] for e in expressions}


@pytest.mark.parametrize("name", POLICIES)
def test_cel_references_only_fields_that_exist(policy_objects, name, defs, crds) -> None:
    policy = r.one(policy_objects, "ValidatingAdmissionPolicy", name)
    folder = SCHEMAS / f"v{K8S_VERSION}.0-local-strict"
    kinds = ("node-v1", "pod-v1", "event-v1", "lease-coordination-v1")
    schemas = [json.loads((folder / f"{kind}.json").read_text()) for kind in kinds]
    nrt = checks.crd_schema(
        next(c for c in crds if c["spec"]["names"]["kind"] == "NodeResourceTopology"), "v1alpha2"
    )
    variables = {v["name"] for v in policy["spec"]["variables"]}
    missing = []
    for expression in _expressions(policy["spec"]):
        for root, *path in checks.cel_field_paths(expression):
            if root in ("object", "oldObject"):
                ok = any(checks.schema_has_path(s, path, defs) for s in (*schemas, nrt))
            elif root == "request":
                ok = checks.schema_has_path(ADMISSION_REQUEST, path, defs)
            else:
                ok = root == "variables" and len(path) == 1 and path[0] in variables
            if not ok:
                missing.append(".".join([root, *path]))
    assert missing == []


def test_field_check_rejects_a_misspelt_field(defs) -> None:
    paths = checks.cel_field_paths("object.metadata.lables == oldObject.spec.taints")
    assert paths == {("object", "metadata", "lables"), ("oldObject", "spec", "taints")}
    node = {
        "properties": {
            "metadata": {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
        }
    }
    assert not checks.schema_has_path(node, ["metadata", "lables"], defs)
    assert checks.schema_has_path(node, ["metadata", "labels", "any-key"], defs)
    assert checks.cel_syntax_problems("has(object.spec") == ["unclosed '('"]
    assert checks.cel_syntax_problems("a ~ b") != []


def test_policy_matches_the_agent_and_every_write_its_role_grants(policy, objects) -> None:
    namespace = rbac.service_account_namespace(objects, "gputopo-agent")
    username = f"system:serviceaccount:{namespace}:gputopo-agent"
    (condition,) = policy["spec"]["matchConditions"]
    assert f"'{username}'" in condition["expression"]
    granted = rbac.effective_permissions(objects, "gputopo-agent", namespace)
    operations = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE"}
    writes = {(g, res, operations[v]) for _, g, res, v in granted if v in operations}
    matched = {
        (g, res, op)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for op in rule["operations"]
    }
    assert writes == matched


def test_node_name_comes_from_the_token_and_labels_cover_what_the_agent_manages(policy) -> None:
    text = json.dumps(policy["spec"])
    assert f"request.userInfo.extra['{NODE_NAME_KEY}']" in text
    assert "NODE_NAME" not in text
    assert all(label.startswith(PREFIXES) for label in MANAGED)
    assert all(text.count(f"k.startsWith('{p}')") == 2 for p in PREFIXES)  # set, and removed


def test_only_the_schedulers_and_the_agents_service_accounts_write_share_records(
    policy_objects, objects
) -> None:
    """gputopo.io/* pod annotations and share Leases (gputopo-share-<node>): the usernames the
    policies let through are the ServiceAccounts the install runs the two as."""
    users = {
        name: f"system:serviceaccount:{rbac.service_account_namespace(objects, name)}:{name}"
        for name in ("gputopo-scheduler", "gputopo-agent")
    }
    pods = r.one(policy_objects, "ValidatingAdmissionPolicy", "gputopo-pod-annotations")["spec"]
    (condition,) = pods["matchConditions"]
    assert all(f"'{user}'" in condition["expression"] for user in users.values())
    (rule,) = pods["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (
        ["pods", "pods/status"],
        ["CREATE", "UPDATE"],
    )
    assert "'gputopo.io/'" in json.dumps(pods["variables"])
    leases = r.one(policy_objects, "ValidatingAdmissionPolicy", "gputopo-share-leases")["spec"]
    (condition,) = leases["matchConditions"]
    assert f"'{SHARE_LOCK_PREFIX}'" in condition["expression"]
    variables = {v["name"]: v["expression"] for v in leases["variables"]}
    assert variables == {
        "scheduler": f"request.userInfo.username == '{users['gputopo-scheduler']}'",
        "agent": f"request.userInfo.username == '{users['gputopo-agent']}'",
    }
