"""The NetworkPolicies: each selects its component's pods and admits only the metrics port, from
namespaces labelled for scraping; nothing else that must reach the pods is cut off."""

from __future__ import annotations

import pytest

from tests.builders import render as r

SCRAPE_LABEL = {"gputopo.io/scrape-metrics": "true"}
WORKLOADS = [
    pytest.param("DaemonSet", "gputopo-agent", "gputopo-agent-metrics", 9445, id="agent"),
    pytest.param(
        "Deployment", "gputopo-scheduler", "gputopo-scheduler-metrics", 9446, id="scheduler"
    ),
]


@pytest.mark.parametrize(("kind", "name", "policy_name", "port"), WORKLOADS)
def test_policy_selects_the_workload_and_admits_only_scrapers_on_metrics(
    objects, kind, name, policy_name, port
):
    workload = r.one(objects, kind, name)
    policy = r.one(objects, "NetworkPolicy", policy_name)
    assert policy["metadata"]["namespace"] == workload["metadata"]["namespace"]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress (API server, DNS) untouched
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": SCRAPE_LABEL}}]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert rule["ports"] == [{"protocol": "TCP", "port": "metrics"}]
    assert ports == {"metrics": port}  # the only port: nothing else needs to be reachable


@pytest.mark.parametrize(("kind", "name", "policy_name", "port"), WORKLOADS)
def test_probes_stay_node_local(objects, kind, name, policy_name, port):
    """Probes come from the kubelet on the pod's own node, which NetworkPolicy cannot block, as
    long as the pod is on the pod network (a hostNetwork pod is outside NetworkPolicy)."""
    pod = r.pod_specs(r.one(objects, kind, name))[0]
    assert not pod.get("hostNetwork")
    (container,) = pod["containers"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "metrics"
        assert "host" not in container[probe]["httpGet"]
