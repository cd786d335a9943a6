"""The shipped dashboard and alerts (daemonset/optional/monitoring/) against the live stack: a
real agent on fixture GPUs and a real scheduler on the fake API server, placing pods.

Every metric a dashboard query or an alert names is on the agent's or the scheduler's live
`/metrics` (or the MPS DaemonSet's, which the stack does not run); and a real Prometheus
scraping both every second gets at least one series for every dashboard query, loads the rules,
and fires `GputopoGpuUnhealthy` once an Xid makes a GPU Unhealthy (and
`GputopoQueueBelowGuarantee` for the queue the workload leaves short). That first Xid shows in the
dashboard's Xid panel (an `increase()`), and with a standby scheduler replica scraped too, the
Cluster row counts the cluster once."""

from __future__ import annotations

import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from scheduler.cli.runtime import LeaseTiming
from tests.builders import monitoring as mon
from tests.builders.agentnode import NODE
from tests.builders.prometheus import PROMETHEUS, PrometheusServer, Target, binary, prometheus
from tests.builders.queues import create_namespace, create_queue, queue_body
from tests.builders.scheduler import create_pod, hold_lease, node_of, pod_body, running, wait_for
from tests.builders.stack import Stack, running_stack
from tests.fakeapi import FakeApiServer

TEAM = "team-a"
CONVERGE_S = 90.0  # generous: 1 s scrapes and evaluations, on 2 busy cores


def _workload(stack: Stack, api: client.ApiClient) -> None:
    """A queue with min 4 GPUs using 2 while a pod too big for the node waits in it; a paused
    queue; one device allocated through the kubelet."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    create_namespace(core, TEAM)
    create_queue(custom, queue_body(TEAM, gpu_min=4, gpu_max=8, namespaces=[TEAM]))
    create_queue(custom, queue_body("held", gpu_max=8, namespaces=["team-b"], paused=True))
    for name, gpus in (("train-0", 1), ("train-1", 1), ("huge", 16)):
        create_pod(core, pod_body(name, gpus=gpus, namespace=TEAM))
    for name in ("train-0", "train-1"):
        wait_for(lambda name=name: node_of(stack.fake, name, TEAM), 10, f"{name} bound")
    wait_for(lambda: stack.kubelet.connected("nvidia.com/gpu"), 10, "the kubelet connected")
    stack.kubelet.allocate("nvidia.com/gpu", [str(stack.agent.inventory.gpus[0].uuid)])


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with FakeApiServer() as fake, running_stack(fake) as running:
        api = fake.api_client()
        try:
            _workload(running, api)
            yield running
        finally:
            api.close()  # type: ignore[no-untyped-call]


def _page(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text: str = reply.read().decode()
        return text


@pytest.mark.timeout(120)
def test_every_metric_the_dashboard_and_the_alerts_name_is_exported(stack) -> None:
    exported = mon.exported_names(_page(stack.agent_port)) | mon.exported_names(
        _page(stack.scheduler_port)
    )
    exported |= mon.exported_names(mon.mps_page())  # GputopoMpsNotServing; no MPS daemon here
    queries = list(mon.all_queries())
    unknown = [
        f"{q.where}: {name}"
        for q in queries
        for name in sorted(mon.metric_names(q.expr) - mon.PROMETHEUS_OWN - exported)
    ]
    assert unknown == []
    named = set().union(*(mon.metric_names(q.expr) for q in queries))
    assert {"gputopo_agent_xid_events_total", "gputopo_scheduler_gpus"} <= named


def _empty(prom: PrometheusServer) -> list[str]:
    return [f"{q.where}: {q.expr}" for q in mon.dashboard_queries() if not prom.query(q.expr)]


def _firing(prom: PrometheusServer) -> set[tuple[str, str]]:
    """(alertname, gpu or queue) of every firing alert."""
    return {
        (a["labels"]["alertname"], a["labels"].get("gpu") or a["labels"].get("queue", ""))
        for a in prom.alerts()
        if a["state"] == "firing"
    }


def _evaluated(prom: PrometheusServer) -> bool:
    rules = prom.rules()
    return len(rules) == len(mon.alert_rules()) and all(
        r["health"] == "ok" and not r["lastEvaluation"].startswith("0001") for r in rules
    )


STANDBY_LEASE = LeaseTiming(duration=1.0, renew_deadline=0.6, retry_period=0.2)


def _targets(stack: Stack, standby_port: int) -> list[Target]:
    """The agent, and both scheduler replicas as one job (two pods of the Deployment)."""
    return [
        Target("gputopo-agent", f"127.0.0.1:{stack.agent_port}", {"node": NODE}),
        Target("gputopo-scheduler", f"127.0.0.1:{stack.scheduler_port}", {}),
        Target("gputopo-scheduler", f"127.0.0.1:{standby_port}", {}),
    ]


def _cluster_row(prom: PrometheusServer, port: int | None = None) -> dict[str, float]:
    """The dashboard's Cluster-row queries over every replica, or over the one on `port`."""
    where = "" if port is None else f'{{instance="127.0.0.1:{port}"}}'
    exprs = {
        "gpus": f"sum(gputopo_scheduler_gpus{where})",
        "fragmented": f"sum(gputopo_scheduler_fragmented_gpus{where})",
        "pending": f"sum(gputopo_scheduler_pending_pods{where})",
        "oldest": f"count(gputopo_scheduler_pending_oldest_seconds{where})",
    }
    return {
        name: float(result[0]["value"][1])
        for name, expr in exprs.items()
        if (result := prom.query(expr))
    }


def _xid_panel(prom: PrometheusServer) -> dict[str, float]:
    """The dashboard's Xid panel now: its value by Xid."""
    (expr,) = [q.expr for q in mon.dashboard_queries() if "xid_events_total" in q.expr]
    return {r["metric"]["xid"]: float(r["value"][1]) for r in prom.query(expr)}


@pytest.fixture(scope="module")
def executable() -> str:
    """The prometheus binary; the test skips (before the stack starts) where there is none."""
    found = binary(PROMETHEUS)
    if found is None:
        pytest.skip("no prometheus binary: install Debian's package (apt-get install prometheus)")
    return found


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_prometheus_answers_every_dashboard_query_and_fires_an_alert(executable, stack) -> None:
    rules = mon.rule_file(Path(tempfile.mkdtemp(dir="/tmp")) / "rules.yaml", for_duration="2s")
    hold_lease(stack.fake, stack.scheduler.kube.identity)  # the stack's scheduler leads
    with (
        running(stack.fake, leader_elect=True, lease=STANDBY_LEASE) as standby,
        prometheus(executable, _targets(stack, standby.server.port), [rules]) as prom,
    ):
        both = {"gputopo-agent", "gputopo-scheduler"}
        wait_for(lambda: prom.healthy_targets() == both, CONVERGE_S, "both targets scraped")
        wait_for(lambda: _evaluated(prom), CONVERGE_S, "every rule evaluated")
        assert _cluster_row(prom) == _cluster_row(prom, stack.scheduler_port)
        assert _cluster_row(prom, standby.server.port) == {}
        assert ("GputopoGpuUnhealthy", "3") not in _firing(prom)
        stack.fake_nvml.set_lost(3)  # a reset-required Xid on a GPU that stays lost
        stack.fake_nvml.emit_xid(3, 79)
        deadline, empty = time.monotonic() + CONVERGE_S, _empty(prom)
        while empty and time.monotonic() < deadline:
            time.sleep(1)
            empty = _empty(prom)
        assert empty == []
        firing = wait_for(
            lambda: (f := _firing(prom)) >= {("GputopoGpuUnhealthy", "3")} and f,
            CONVERGE_S,
            "GputopoGpuUnhealthy firing",
        )
        shown = wait_for(lambda: _xid_panel(prom).get("79", 0.0) > 0, CONVERGE_S, "Xid 79 shown")
    assert shown
    assert ("GputopoQueueBelowGuarantee", TEAM) in firing
    assert {name for name, _ in firing} <= {"GputopoGpuUnhealthy", "GputopoQueueBelowGuarantee"}
