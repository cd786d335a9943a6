"""Each namespace enforces the strictest Pod Security Standard its workloads pass."""

from __future__ import annotations

from tests.builders import manifests as checks
from tests.builders import render as r

ENFORCE = "pod-security.kubernetes.io/enforce"


def test_each_namespace_enforces_the_strictest_level_its_pods_pass(objects):
    pods_by_namespace: dict[str, list[r.Obj]] = {}
    for obj in objects:
        for spec in r.pod_specs(obj):
            pods_by_namespace.setdefault(obj["metadata"]["namespace"], []).append(spec)
    enforced = {
        ns["metadata"]["name"]: ns["metadata"]["labels"][ENFORCE]
        for ns in r.by_kind(objects, "Namespace")
    }
    strictest = {
        ns: max((checks.strictest_level(p) for p in pods), key=checks.PSS_LEVELS.index)
        for ns, pods in pods_by_namespace.items()
    }
    assert enforced == strictest == {"gputopo-agent": "privileged", "gputopo-system": "restricted"}


def test_only_the_agent_needs_privileged_and_only_for_host_paths(objects):
    pod = r.pod_specs(r.one(objects, "DaemonSet", "gputopo-agent"))[0]
    assert all(p.startswith("hostPath volume ") for p in checks.baseline_problems(pod))


def test_level_checks_catch_what_each_level_forbids():
    locked = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "c",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "volumes": [{"name": "cfg", "configMap": {"name": "x"}}],
    }
    assert checks.strictest_level(locked) == "restricted"
    as_root = {**locked, "securityContext": {"runAsUser": 0}}
    assert checks.strictest_level(as_root) == "baseline"
    with_host = {**locked, "volumes": [{"name": "sys", "hostPath": {"path": "/sys"}}]}
    assert checks.strictest_level(with_host) == "privileged"
    assert checks.strictest_level({**locked, "hostNetwork": True}) == "privileged"
