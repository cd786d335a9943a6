"""daemonset/optional/queue-label/: the opt-in policy that makes `gputopo.io/queue` immutable
parses, validates against the 1.30 schemas, is not in the default install, and its CEL is well
formed and reads only fields a Pod has."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate

from tests.builders import manifests as checks
from tests.builders import render as r

K8S_VERSION = "1.30"
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
FOLDER = r.DAEMONSET / "optional" / "queue-label"


def test_policy_validates_is_opt_in_and_reads_real_fields(objects) -> None:
    rendered = r.render(FOLDER).objects
    assert sorted(o["kind"] for o in rendered) == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    for obj in rendered:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    assert not [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    policy = r.one(rendered, "ValidatingAdmissionPolicy", "gputopo-queue-label-immutable")
    (validation,) = policy["spec"]["validations"]
    expression = validation["expression"]
    assert checks.cel_syntax_problems(expression) == []
    folder = SCHEMAS / f"v{K8S_VERSION}.0-local-strict"
    defs = json.loads((folder / "_definitions.json").read_text())["$defs"]
    pod = json.loads((folder / "pod-v1.json").read_text())
    paths = checks.cel_field_paths(expression)
    assert {root for root, *_ in paths} == {"object", "oldObject"}
    assert all(checks.schema_has_path(pod, list(path), defs) for _, *path in paths)
    assert "'gputopo.io/queue'" in expression
