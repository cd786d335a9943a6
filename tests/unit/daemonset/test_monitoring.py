"""daemonset/optional/monitoring/, offline: the Grafana dashboard's structure and queries, the
PrometheusRule's alerts (each with a runbook in RUNBOOKS.md, `promtool check rules` where it is
installed), the ConfigMap Grafana's sidecar loads the dashboard from, the plain-Prometheus scrape
config, and the README's metrics table against the code."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.builders import monitoring as mon
from tests.builders import render as r
from tests.builders.prometheus import PROMTOOL, binary

ROWS = ["Cluster", "Scheduler", "Queues", "Preemption", "Nodes"]
ALERTS = {
    "GputopoAgentDown": "5m",
    "GputopoGpuUnhealthy": "10m",
    "GputopoNrtNotPublished": "1m",
    "GputopoDevicePluginRegistrationFailing": "5m",
    "GputopoMpsNotServing": "5m",
    "GputopoNoSchedulerLeader": "5m",
    "GputopoPodsPendingTooLong": "1m",
    "GputopoQueueBelowGuarantee": "10m",
}


def test_the_dashboard_has_a_row_per_part_a_datasource_and_a_node_variable():
    dash = mon.dashboard()
    assert [p["title"] for p in dash["panels"] if p["type"] == "row"] == ROWS
    datasource, node = dash["templating"]["list"]
    assert (datasource["name"], datasource["type"], datasource["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    assert (node["name"], node["type"], node["multi"], node["includeAll"]) == (
        "node",
        "query",
        True,
        True,
    )
    assert node["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert node["query"]["query"] == "label_values(gputopo_agent_gpu_healthy, node)"
    assert mon.query_variables(dash) == {"node": ".*"}
    assert dash["uid"] == "gputopo"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_every_panel_queries_the_chosen_prometheus_and_fits_the_grid():
    for panel in mon.data_panels(mon.dashboard()):
        where = panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        assert panel["targets"], where
        assert [t["refId"] for t in panel["targets"]] == [
            chr(ord("A") + i) for i in range(len(panel["targets"]))
        ], where
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"]), where
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, where
        assert panel["description"], where


def _nodes_row(dash: r.Obj) -> list[r.Obj]:
    rows = [p for p in dash["panels"] if p["type"] == "row"]
    start = next(p["gridPos"]["y"] for p in rows if p["title"] == "Nodes")
    return [p for p in mon.data_panels(dash) if p["gridPos"]["y"] > start]


def test_every_nodes_row_query_follows_the_node_variable():
    panels = _nodes_row(mon.dashboard())
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert exprs
    for expr in exprs:
        selectors = re.findall(r"\b(?:gputopo_agent_\w+|up)(\{[^}]*\})?", expr)
        assert selectors, expr
        assert all('node=~"$node"' in s for s in selectors), expr


def test_the_nodes_row_shows_gpu_utilisation():
    (panel,) = [p for p in _nodes_row(mon.dashboard()) if p["title"] == "GPU utilisation"]
    (target,) = panel["targets"]
    assert mon.metric_names(target["expr"]) == {"gputopo_agent_gpu_utilization_ratio"}
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"


def test_every_query_parses_and_names_only_gputopo_metrics_or_prometheus_own():
    queries = list(mon.all_queries())
    assert len(queries) > 30
    for query in queries:
        names = mon.metric_names(query.expr)
        assert names, query.where
        foreign = {n for n in names - mon.PROMETHEUS_OWN if not n.startswith("gputopo_")}
        assert foreign == set(), query.where


@pytest.mark.parametrize(
    ("expr", "error"),
    [
        pytest.param("sum(rate(x[5m])", "unclosed left parenthesis", id="unbalanced"),
        pytest.param('{__name__="x"}', "selector without a metric name", id="nameless"),
        pytest.param("rate(x[$__rate_interval])", "unexpected character", id="grafana variable"),
    ],
)
def test_a_query_that_does_not_parse_or_names_no_metric_is_refused(expr, error):
    with pytest.raises(ValueError, match=error):
        mon.metric_names(expr)


RUNBOOK_BASE = (
    "https://github.com/gputopo/gputopo/blob/main/daemonset/optional/monitoring/RUNBOOKS.md#"
)


def _runbook_sections() -> dict[str, str]:
    """RUNBOOKS.md's sections by the anchor GitHub gives their heading."""
    text = mon.RUNBOOKS.read_text(encoding="utf-8")
    parts = re.split(r"^## (\S+)\n", text, flags=re.M)[1:]
    return {heading.lower(): body for heading, body in zip(parts[::2], parts[1::2], strict=True)}


def test_each_alert_the_issue_asks_for_is_there_with_its_duration_and_runbook():
    rules = mon.alert_rules()
    assert {rule["alert"]: rule["for"] for rule in rules} == ALERTS
    sections = _runbook_sections()
    for rule in rules:
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, rule["alert"]
        url = annotations["runbook_url"]
        assert url == RUNBOOK_BASE + rule["alert"].lower(), rule["alert"]
        steps = re.findall(r"^\d+\. ", sections[url.rpartition("#")[2]], flags=re.M)
        assert len(steps) >= 3, rule["alert"]  # steps, not a phrase
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
    assert set(sections) == {rule["alert"].lower() for rule in rules}


def test_the_mps_alert_reads_what_the_agent_and_the_mps_daemonset_export():
    (rule,) = [x for x in mon.alert_rules() if x["alert"] == "GputopoMpsNotServing"]
    names = mon.metric_names(rule["expr"])
    assert names == {"gputopo_agent_mps_serving", "gputopo_mps_daemon_up"}
    assert names <= mon.exported_by_code()


def test_the_shipped_rules_pass_promtool():
    promtool = binary(PROMTOOL)
    if promtool is None:
        pytest.skip("no promtool: install Debian's prometheus package (apt-get install prometheus)")
    path = mon.rule_file(Path(tempfile.mkdtemp(dir="/tmp")) / "rules.yaml")
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


AGENT = 'instance="10.0.0.7:9445",job="gputopo-agent/gputopo-agent",node="gpu-1"'
SCHED = 'instance="10.0.1.2:9446",job="gputopo-system/gputopo-scheduler"'
MPS_GPU_2 = 'instance="10.0.0.8:9447",job="gputopo-agent/gputopo-mps",node="gpu-2"'
GPU = "nvidia.com/gpu"
# One minute a sample, 20 minutes: each alert's condition holds from the start, and for each a
# near miss that must stay quiet (a healthy GPU, a registration that recovered, a gated pod, a
# paused queue).
SERIES = {
    f"up{{{AGENT}}}": "0x20",
    f'gputopo_agent_gpu_healthy{{{AGENT},gpu="3",uuid="GPU-3",model="H100"}}': "0x20",
    f'gputopo_agent_gpu_healthy{{{AGENT},gpu="4",uuid="GPU-4",model="H100"}}': "1x20",
    f"gputopo_agent_publish_last_success_timestamp_seconds{{{AGENT}}}": "0x20",
    f'gputopo_agent_deviceplugin_registrations_total{{{AGENT},resource="{GPU}",result="error"}}': (
        "0+1x20"
    ),
    f'gputopo_agent_deviceplugin_registrations_total{{{AGENT},resource="mig",result="error"}}': (
        "0+1x20"
    ),
    f'gputopo_agent_deviceplugin_registrations_total{{{AGENT},resource="mig",result="ok"}}': (
        "0+1x20"
    ),
    f"gputopo_agent_mps_serving{{{AGENT}}}": "0x20",
    f'gputopo_mps_daemon_up{{{MPS_GPU_2},uid="1000"}}': "1x20",
    f"gputopo_scheduler_leader{{{SCHED}}}": "0x20",
    f'gputopo_scheduler_pending_oldest_seconds{{{SCHED},reason="unschedulable"}}': "1000x20",
    f'gputopo_scheduler_pending_oldest_seconds{{{SCHED},reason="gated"}}': "5000x20",
    **{
        f'gputopo_scheduler_queue_{figure}{{{SCHED},queue="{queue}"{res}}}': value
        for queue in ("short", "paused")
        for figure, res, value in (
            ("used", f',resource="{GPU}"', "1x20"),
            ("min", f',resource="{GPU}"', "4x20"),
            ("pending_units", "", "2x20"),
            ("paused", "", "1x20" if queue == "paused" else "0x20"),
        )
    },
}
AGENT_LABELS = {"instance": "10.0.0.7:9445", "job": "gputopo-agent/gputopo-agent", "node": "gpu-1"}
SCHED_LABELS = {"instance": "10.0.1.2:9446", "job": "gputopo-system/gputopo-scheduler"}
FIRING = [
    ("4m", "GputopoAgentDown", []),  # for: 5m
    ("6m", "GputopoAgentDown", [{**AGENT_LABELS, "severity": "critical"}]),
    ("9m", "GputopoGpuUnhealthy", []),  # for: 10m
    (
        "11m",
        "GputopoGpuUnhealthy",
        [{**AGENT_LABELS, "severity": "warning", "gpu": "3", "uuid": "GPU-3", "model": "H100"}],
    ),
    ("7m", "GputopoNrtNotPublished", [{**AGENT_LABELS, "severity": "warning"}]),
    (
        "12m",
        "GputopoDevicePluginRegistrationFailing",
        [
            {
                "instance": AGENT_LABELS["instance"],
                "node": "gpu-1",
                "resource": GPU,
                "severity": "critical",
            }
        ],
    ),
    ("4m", "GputopoMpsNotServing", []),  # for: 5m
    ("6m", "GputopoMpsNotServing", [{"node": "gpu-1", "severity": "critical"}]),
    ("6m", "GputopoNoSchedulerLeader", [{"severity": "critical"}]),
    ("2m", "GputopoPodsPendingTooLong", [{"reason": "unschedulable", "severity": "warning"}]),
    ("9m", "GputopoQueueBelowGuarantee", []),  # for: 10m
    (
        "11m",
        "GputopoQueueBelowGuarantee",
        [{**SCHED_LABELS, "queue": "short", "resource": GPU, "severity": "warning"}],
    ),
]


def test_each_alert_fires_when_its_condition_holds_and_only_after_its_duration():
    """`promtool test rules` on the shipped rules (annotations aside) with made-up series."""
    promtool = binary(PROMTOOL)
    if promtool is None:
        pytest.skip("no promtool: install Debian's prometheus package (apt-get install prometheus)")
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    mon.rule_file(folder / "rules.yaml", annotations=False)
    cases = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": k, "values": v} for k, v in SERIES.items()],
                "alert_rule_test": [
                    {"eval_time": at, "alertname": name, "exp_alerts": [
                        {"exp_labels": labels} for labels in alerts
                    ]}
                    for at, name, alerts in FIRING
                ],
            }
        ],
    }  # fmt: skip
    (folder / "tests.yaml").write_text(yaml.safe_dump(cases), encoding="utf-8")
    done = subprocess.run(
        [promtool, "test", "rules", "tests.yaml"],
        capture_output=True, text=True, timeout=60, cwd=folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert {name for _, name, _ in FIRING} == set(ALERTS)


def test_the_dashboard_configmap_is_labelled_for_grafanas_sidecar():
    kubectl = r.kubectl_path()
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    rendered = r.render_with_kubectl(kubectl, mon.MONITORING)
    (configmap,) = r.by_kind(rendered, "ConfigMap")
    assert configmap["metadata"]["name"] == "gputopo-dashboard"  # no hash suffix to chase
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["gputopo-dashboard.json"]) == mon.dashboard()
    (rule,) = r.by_kind(rendered, "PrometheusRule")
    assert rule["spec"] == mon.prometheus_rule()["spec"]


def test_every_metric_the_dashboard_and_the_alerts_use_is_in_the_readme_table():
    exported = mon.exported_by_code()
    used = {
        mon.family(name, exported)
        for query in mon.all_queries()
        for name in mon.metric_names(query.expr) - mon.PROMETHEUS_OWN
    }
    assert len(used) > 20
    assert used - mon.readme_metrics() == set()


def test_the_readme_table_lists_exactly_the_metrics_the_code_exports():
    exported = mon.exported_by_code()
    assert {mon.family(name, exported) for name in exported} == mon.readme_metrics()


def _scrape_jobs() -> dict[str, r.Obj]:
    config = yaml.safe_load(mon.SCRAPE_CONFIG.read_text(encoding="utf-8"))
    assert set(config) == {"scrape_configs"}
    return {job["job_name"]: job for job in config["scrape_configs"]}


def test_the_scrape_config_gives_the_job_names_the_alerts_match():
    jobs = _scrape_jobs()
    assert set(jobs) == {"gputopo-agent", "gputopo-mps", "gputopo-scheduler"}
    up_matchers = {
        m for q in mon.all_queries() for m in re.findall(r'up\{[^}]*job=~"([^"]+)"', q.expr)
    }
    assert up_matchers
    assert all(any(re.fullmatch(m, job) for job in jobs) for m in up_matchers)


def test_each_scrape_job_keeps_its_workloads_metrics_port_and_labels_the_node(objects):
    mps = r.render_with_kubectl(r.kubectl_path() or "kubectl", r.OPTIONAL / "mps")
    workloads = {
        o["metadata"]["name"]: o
        for o in [*objects, *mps]
        if o["kind"] in {"DaemonSet", "Deployment"}
    }
    for name, job in _scrape_jobs().items():
        workload = workloads[name]
        (sd,) = job["kubernetes_sd_configs"]
        assert (sd["role"], sd["namespaces"]["names"]) == (
            "pod",
            [workload["metadata"]["namespace"]],
        )
        keep = next(x for x in job["relabel_configs"] if x.get("action") == "keep")
        labels = workload["spec"]["template"]["metadata"]["labels"]
        (port,) = workload["spec"]["template"]["spec"]["containers"][0]["ports"]
        values = {
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": labels["app.kubernetes.io/name"],
            "__meta_kubernetes_pod_label_app_kubernetes_io_component": labels[
                "app.kubernetes.io/component"
            ],
            "__meta_kubernetes_pod_container_port_name": port["name"],
        }
        assert re.fullmatch(keep["regex"], ";".join(values[s] for s in keep["source_labels"]))
        targets = {x.get("target_label") for x in job["relabel_configs"]}
        assert ("node" in targets) == (workload["kind"] == "DaemonSet"), name


def test_the_scrape_config_passes_promtool():
    promtool = binary(PROMTOOL)
    if promtool is None:
        pytest.skip("no promtool: install Debian's prometheus package (apt-get install prometheus)")
    done = subprocess.run(
        [promtool, "check", "config", str(mon.SCRAPE_CONFIG)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if "field kubernetes_sd_configs not found" in done.stdout + done.stderr:
        pytest.skip("this promtool is built without Kubernetes discovery (Debian's is)")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr
