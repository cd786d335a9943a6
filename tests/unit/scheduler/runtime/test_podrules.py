"""Reading a pod's inter-pod rules from its JSON: the stock scheduler's namespaces, label keys and
policies; preferences checked and not kept; malformed fields named; a namespace selector with
requirements kept for the namespaces' labels to decide, beside the namespaces listed."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.placement.request import (
    InterPodPreferences,
    LabelSelector,
    NodeSelectorRequirement,
    Operator,
    PodTerm,
    SpreadConstraint,
)
from scheduler.runtime.cluster.podrules import PodRules, inter_pod_rules
from scheduler.runtime.cluster.podspec import pod_request

ZONE = "topology.kubernetes.io/zone"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def body(namespace: str = "ml", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": namespace, "labels": {"app": "web", "rev": "7"}},
        "spec": {"containers": [{"name": "c"}], **spec},
    }


def web(*more: NodeSelectorRequirement) -> LabelSelector:
    own = NodeSelectorRequirement(key="app", operator=Operator.IN, values=("web",))
    return LabelSelector(requirements=(own, *more))


def test_a_pod_without_rules_has_none():
    assert inter_pod_rules(body()) == PodRules()
    assert inter_pod_rules(body(affinity={"nodeAffinity": {}})) == PodRules()


def test_required_terms_default_to_the_pods_namespace():
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}
    read = inter_pod_rules(body(affinity={"podAntiAffinity": {REQUIRED: [term]}}))
    assert read.preferences is None
    rules = read.rules
    assert rules is not None
    assert rules.anti_affinity == (
        PodTerm(selector=web(), namespaces=frozenset({"ml"}), topology_key=ZONE),
    )
    assert rules.affinity == ()
    assert rules.spread == ()


def test_namespaces_listed_or_every_namespace():
    listed = {"labelSelector": {}, "topologyKey": ZONE, "namespaces": ["a", "b"]}
    every = {"labelSelector": {}, "topologyKey": ZONE, "namespaceSelector": {}}
    rules = inter_pod_rules(body(affinity={"podAffinity": {REQUIRED: [listed, every]}})).rules
    assert rules is not None
    assert [t.namespaces for t in rules.affinity] == [frozenset({"a", "b"}), None]
    assert rules.affinity[0].selector == LabelSelector()  # `{}` selects every pod


def test_a_namespace_selector_with_requirements_adds_the_namespaces_it_picks():
    term = {
        "labelSelector": {},
        "topologyKey": ZONE,
        "namespaces": ["ops"],
        "namespaceSelector": {"matchLabels": {"team": "x"}},
    }
    read = inter_pod_rules(body(affinity={"podAffinity": {REQUIRED: [term]}}))
    assert read.rules is not None
    (near,) = read.rules.affinity
    assert near.namespaces == frozenset({"ops"})
    assert near.namespace_selector == LabelSelector(
        requirements=(NodeSelectorRequirement(key="team", operator=Operator.IN, values=("x",)),)
    )
    labels = {"data": {"team": "x"}, "ml": {"team": "y"}}
    picks = {ns: near.selects(pod_request(body(namespace=ns)), labels) for ns in ("data", "ml")}
    assert picks == {"data": True, "ml": False}
    assert near.selects(pod_request(body(namespace="ops")), labels)  # listed, whatever its labels
    read = pod_request(body(affinity={"podAffinity": {REQUIRED: [term]}})).inter_pod
    assert read is not None
    assert read.affinity[0].namespace_selector is not None


def test_match_and_mismatch_label_keys_take_the_pods_values():
    term = {
        "labelSelector": {"matchLabels": {"app": "web"}},
        "topologyKey": ZONE,
        "matchLabelKeys": ["rev", "absent"],
        "mismatchLabelKeys": ["app"],
    }
    rules = inter_pod_rules(body(affinity={"podAntiAffinity": {REQUIRED: [term]}})).rules
    assert rules is not None
    assert rules.anti_affinity[0].selector == web(
        NodeSelectorRequirement(key="rev", operator=Operator.IN, values=("7",)),
        NodeSelectorRequirement(key="app", operator=Operator.NOT_IN, values=("web",)),
    )


def test_spread_constraints_with_policies_and_the_api_servers_merged_keys():
    constraints = [
        {
            "maxSkew": 2,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "rev", "operator": "In", "values": ["7"]}],
            },
            "matchLabelKeys": ["rev"],  # already merged by the API server: read once
            "minDomains": 3,
            "nodeAffinityPolicy": "Ignore",
            "nodeTaintsPolicy": "Honor",
        },
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"},
    ]
    read = inter_pod_rules(body(topologySpreadConstraints=constraints))
    rules = read.rules
    assert rules is not None
    assert rules.spread == (
        SpreadConstraint(
            max_skew=2,
            topology_key=ZONE,
            selector=web(NodeSelectorRequirement(key="rev", operator=Operator.IN, values=("7",))),
            min_domains=3,
            honor_affinity=False,
            honor_taints=True,
        ),
    )


def test_preferences_are_kept_apart_from_the_rules():
    preferred = [{"weight": 50, "podAffinityTerm": {"labelSelector": {}, "topologyKey": ZONE}}]
    soft = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"}
    spec = body(
        affinity={"podAntiAffinity": {PREFERRED: preferred}}, topologySpreadConstraints=[soft]
    )
    read = inter_pod_rules(spec)
    assert read.rules is None
    assert read.preferences == InterPodPreferences(
        anti_affinity=(
            (
                50,
                PodTerm(selector=LabelSelector(), namespaces=frozenset({"ml"}), topology_key=ZONE),
            ),
        ),
        spread=(SpreadConstraint(max_skew=1, topology_key=ZONE, selector=None),),
    )
    request = pod_request(spec)
    assert request.inter_pod is None
    assert request.preferences == read.preferences
    assert request.namespace == "ml"
    assert dict(request.labels) == {"app": "web", "rev": "7"}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(
            {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": ZONE}]},
            r"spec.topologySpreadConstraints\[0\].maxSkew: must be an integer >= 1",
            id="skew",
        ),
        pytest.param(
            {
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "Maybe"}
                ]
            },
            r"spec.topologySpreadConstraints\[0\].whenUnsatisfiable",
            id="when",
        ),
        pytest.param(
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "minDomains": 2,
                    }
                ]
            },
            r"\[0\].minDomains: only with whenUnsatisfiable DoNotSchedule",
            id="min domains",
        ),
        pytest.param(
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "nodeTaintsPolicy": "Sometimes",
                    }
                ]
            },
            r"\[0\].nodeTaintsPolicy: must be Honor or Ignore",
            id="policy",
        ),
        pytest.param(
            {"affinity": {"podAffinity": {REQUIRED: [{"labelSelector": {}}]}}},
            rf"spec.affinity.podAffinity.{REQUIRED}\[0\].topologyKey",
            id="term key",
        ),
        pytest.param(
            {
                "affinity": {
                    "podAntiAffinity": {
                        REQUIRED: [
                            {
                                "topologyKey": ZONE,
                                "labelSelector": {
                                    "matchExpressions": [{"key": "a", "operator": "Gt"}]
                                },
                            }
                        ]
                    }
                }
            },
            r"labelSelector.matchExpressions\[0\].operator: 'Gt' is not one of",
            id="operator",
        ),
        pytest.param(
            {"affinity": {"podAntiAffinity": {PREFERRED: [{"weight": 0}]}}},
            rf"{PREFERRED}\[0\].weight: must be an integer from 1 to 100",
            id="weight",
        ),
        pytest.param(
            {"affinity": {"podAffinity": {REQUIRED: {"topologyKey": ZONE}}}},
            rf"spec.affinity.podAffinity.{REQUIRED}: must be a list",
            id="not a list",
        ),
    ],
)
def test_malformed_rules_name_the_field(spec, field):
    with pytest.raises(ValueError, match=field):
        inter_pod_rules(body(**spec))
    with pytest.raises(ValueError, match=r"pod ml/p: "):
        pod_request(body(**spec))
