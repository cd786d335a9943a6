"""Least privilege per component: exactly the permissions DESIGN §9 and the task list, no more."""

from __future__ import annotations

import pytest

from tests.builders import manifests as checks
from tests.builders import rbac
from tests.builders import render as r

AGENT_NS = "gputopo-agent"
SCHEDULER_NS = "gputopo-system"
CLUSTER = rbac.CLUSTER


def _grants(scope: str, group: str, resource: str, verbs: str) -> set[tuple[str, str, str, str]]:
    return {(scope, group, resource, verb) for verb in verbs.split()}


# The offline statement of what the derivation tests measure from the running components
# (tests/integration/agent/kube/test_rbac_derived.py, .../scheduler/kubeapi/test_rbac_derived.py).
AGENT = (
    _grants(CLUSTER, "", "nodes", "get patch")
    | _grants(CLUSTER, "", "pods", "get list patch")
    | _grants(CLUSTER, "", "events", "create")
    | _grants(CLUSTER, "topology.node.k8s.io", "noderesourcetopologies", "create get patch")
    | _grants(SCHEDULER_NS, "coordination.k8s.io", "leases", "get update")  # share locks (§12)
)

SCHEDULER = (
    _grants(CLUSTER, "", "pods", "delete list patch watch")
    | _grants(CLUSTER, "", "pods/binding", "create")
    | _grants(CLUSTER, "", "pods/status", "patch")
    | _grants(CLUSTER, "", "events", "create")
    | _grants(CLUSTER, "", "nodes", "list watch")
    | _grants(CLUSTER, "", "namespaces", "list watch")  # what a namespaceSelector reads
    | _grants(CLUSTER, "topology.node.k8s.io", "noderesourcetopologies", "list watch")
    | _grants(CLUSTER, "scheduling.x-k8s.io", "podgroups", "list watch")
    | _grants(CLUSTER, "scheduling.x-k8s.io", "podgroups/status", "patch")
    | _grants(CLUSTER, "scheduling.x-k8s.io", "elasticquotas", "list watch")
    | _grants(CLUSTER, "scheduling.k8s.io", "podgroups", "list watch")  # upstream gangs (§15)
    | _grants(CLUSTER, "scheduling.k8s.io", "workloads", "list watch")  # ... on 1.35
    | _grants(CLUSTER, "scheduling.k8s.io", "compositepodgroups", "list watch")  # ... trees
    | _grants(CLUSTER, "scheduling.k8s.io", "podgroups/status", "patch")
    | _grants(CLUSTER, "policy", "poddisruptionbudgets", "list watch")
    | _grants(CLUSTER, "scheduling.gputopo.io", "queues", "list watch")
    | _grants(CLUSTER, "scheduling.gputopo.io", "queues/status", "patch")
    | _grants(CLUSTER, "", "persistentvolumeclaims", "get")
    | _grants(CLUSTER, "storage.k8s.io", "storageclasses", "list")
    | _grants(SCHEDULER_NS, "coordination.k8s.io", "leases", "create get update")
    | _grants(CLUSTER, "resource.k8s.io", "deviceclasses", "list watch")  # DRA (§14)
    | _grants(CLUSTER, "resource.k8s.io", "resourceslices", "list watch")
    | _grants(CLUSTER, "resource.k8s.io", "devicetaintrules", "list watch")  # 1.37+
    | _grants(CLUSTER, "resource.k8s.io", "resourceclaims", "get list watch update create delete")
    | _grants(CLUSTER, "resource.k8s.io", "resourceclaims/status", "update")
    | _grants(CLUSTER, "resource.k8s.io", "resourceclaims/binding", "update")
)

effective_permissions = rbac.effective_permissions


@pytest.mark.parametrize(
    ("sa", "namespace", "expected"),
    [
        pytest.param("gputopo-agent", AGENT_NS, AGENT, id="agent"),
        pytest.param("gputopo-scheduler", SCHEDULER_NS, SCHEDULER, id="scheduler"),
    ],
)
def test_service_account_gets_exactly_its_permissions(objects, sa, namespace, expected):
    granted = effective_permissions(objects, sa, namespace)
    assert granted - expected == set(), "more than least privilege"
    assert expected - granted == set(), "missing permissions"


def test_leases_are_granted_only_in_the_scheduler_namespace(objects):
    leases = {
        g
        for g in effective_permissions(objects, "gputopo-scheduler", SCHEDULER_NS)
        if g[2] == "leases"
    }
    assert leases
    assert {g[0] for g in leases} == {SCHEDULER_NS}


def _known(crds: list[r.Obj]) -> dict[tuple[str, str], frozenset[str]]:
    return {**checks.KNOWN_RESOURCES, **checks.EXPECTED_CRD_RESOURCES, **checks.crd_resources(crds)}


def test_every_rule_names_a_served_resource_and_verb(objects, crds):
    roles = [*r.by_kind(objects, "ClusterRole"), *r.by_kind(objects, "Role")]
    assert len(roles) == 4  # agent, agent share locks, scheduler, scheduler leases
    problems = {
        o["metadata"]["name"]: checks.rule_problems(o["rules"], _known(crds)) for o in roles
    }
    assert {k: v for k, v in problems.items() if v} == {}


def test_rules_for_custom_resources_match_our_crds(objects, crds):
    if len(crds) < 2:
        pytest.skip("daemonset/crds/*.yaml are not all in the tree yet (written by other parts)")
    from_crds = checks.crd_resources(crds)
    named = {
        (g, res)
        for o in [*r.by_kind(objects, "ClusterRole"), *r.by_kind(objects, "Role")]
        for (_, g, res, _) in checks.expand_rules(o["rules"], "")
        if g in {"topology.node.k8s.io", "scheduling.x-k8s.io", "scheduling.gputopo.io"}
    }
    read_elsewhere = {("scheduling.x-k8s.io", "elasticquotas")}  # not ours to ship
    assert named - set(from_crds) - read_elsewhere == set()


def test_rule_check_flags_unknown_resources_and_verbs():
    rules = [
        {"apiGroups": [""], "resources": ["pod"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["get"]},
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    ]
    assert checks.rule_problems(rules, checks.KNOWN_RESOURCES) == [
        "rule 0: unknown resource core/pod",
        "rule 1: core/pods/binding has no verb 'get'",
        "rule 2: unknown resource */*",
    ]


def test_crd_resources_table_from_a_crd():
    crd = {
        "spec": {
            "group": "scheduling.x-k8s.io",
            "names": {"plural": "podgroups", "kind": "PodGroup"},
            "versions": [{"name": "v1alpha1", "subresources": {"status": {}}}],
        }
    }
    assert checks.crd_resources([crd]) == {
        ("scheduling.x-k8s.io", "podgroups"): checks.ALL_VERBS,
        ("scheduling.x-k8s.io", "podgroups/status"): checks.STATUS_VERBS,
    }


def test_bindings_point_at_rendered_service_accounts(objects):
    accounts = {
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in r.by_kind(objects, "ServiceAccount")
    }
    subjects = {
        (s["namespace"], s["name"])
        for b in [*r.by_kind(objects, "ClusterRoleBinding"), *r.by_kind(objects, "RoleBinding")]
        for s in b["subjects"]
        if s["kind"] == "ServiceAccount"
    }
    assert (
        subjects == accounts == {(AGENT_NS, "gputopo-agent"), (SCHEDULER_NS, "gputopo-scheduler")}
    )


def test_workloads_use_their_own_service_accounts(objects):
    accounts = {o["metadata"]["name"] for o in r.by_kind(objects, "ServiceAccount")}
    used = {o["kind"]: spec.get("serviceAccountName") for o in objects for spec in r.pod_specs(o)}
    assert used == {"DaemonSet": "gputopo-agent", "Deployment": "gputopo-scheduler"}
    assert set(used.values()) <= accounts
