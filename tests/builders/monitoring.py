"""The shipped monitoring (daemonset/optional/monitoring/): the Grafana dashboard's queries, the
PrometheusRule's alerts, the metric names a PromQL expression reads (parsed with
`promql-parser`), the names a `/metrics` page exports, the metrics the code registers, and the
README's metrics table."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import AgentMetrics
from agent.mps.metrics import MpsMetrics
from scheduler.runtime.gpucount import GpuCounts
from scheduler.runtime.metrics import SchedulerMetrics
from tests.builders.render import OPTIONAL, REPO

MONITORING = OPTIONAL / "monitoring"
DASHBOARD = MONITORING / "gputopo-dashboard.json"
RULES = MONITORING / "prometheusrule.yaml"
RUNBOOKS = MONITORING / "RUNBOOKS.md"
SCRAPE_CONFIG = MONITORING / "prometheus-scrape-config.yaml"
PROMETHEUS_OWN = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE"})
"""Series Prometheus makes itself, which rules may read."""
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL expression of the shipped monitoring and where it comes from."""

    where: str
    expr: str


def dashboard() -> Obj:
    loaded: Obj = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def data_panels(dash: Obj) -> list[Obj]:
    """Every panel but the row headers (which hold no query)."""
    return [p for p in dash["panels"] if p.get("type") != "row"]


def query_variables(dash: Obj) -> dict[str, str]:
    """Each query variable (`$node`) and the value Grafana sends for "All" (its `allValue`)."""
    return {v["name"]: v["allValue"] for v in dash["templating"]["list"] if v["type"] == "query"}


def dashboard_queries(dash: Obj | None = None) -> list[Query]:
    """Every panel's query as Grafana sends it with each variable at "All"."""
    dash = dashboard() if dash is None else dash
    variables = query_variables(dash)

    def sent(expr: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), expr)

    return [
        Query(f"panel {panel['title']!r} target {target['refId']}", sent(target["expr"]))
        for panel in data_panels(dash)
        for target in panel["targets"]
    ]


def prometheus_rule() -> Obj:
    loaded: Obj = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return loaded


def alert_rules(rule: Obj | None = None) -> list[Obj]:
    rule = prometheus_rule() if rule is None else rule
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def rule_queries() -> list[Query]:
    return [Query(f"alert {r['alert']}", r["expr"]) for r in alert_rules()]


def rule_file(path: Path, *, for_duration: str | None = None, annotations: bool = True) -> Path:
    """The PrometheusRule's `spec` as a plain Prometheus rule file; every `for:` replaced by
    `for_duration` when given (the shipped file keeps the real durations), and without the
    annotations when `annotations` is false (rule unit tests then compare labels only)."""
    spec = prometheus_rule()["spec"]
    for rule in (r for group in spec["groups"] for r in group["rules"]):
        if for_duration is not None:
            rule["for"] = for_duration
        if not annotations:
            del rule["annotations"]
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects; ValueError when it does not parse or selects series
    without naming the metric."""
    names: set[str] = set()
    nameless: list[str] = []

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            else:
                nameless.append(str(node))
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    if nameless:
        raise ValueError(f"selector without a metric name: {nameless[0]}")
    return names


def exported_names(page: str) -> set[str]:
    """Every sample name a `/metrics` page declares, with or without samples yet (a labelled
    counter nothing incremented still has its `# TYPE` line)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(page):
        names.update(s.name for s in family.samples)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
    return names


def all_queries() -> Iterator[Query]:
    yield from dashboard_queries()
    yield from rule_queries()


def family(name: str, exported: set[str]) -> str:
    """The metric a sample name belongs to: a histogram's `_bucket`, `_count` and `_sum` are
    its base name; anything else is itself."""
    for suffix in _SUFFIXES["histogram"]:
        base = name.removesuffix(suffix)
        if base != name and base + "_bucket" in exported:
            return base
    return name


def mps_page() -> str:
    """What `gputopo-agent mps` serves on `/metrics` before its first heartbeat (the stacks the
    tests run start no MPS daemon)."""
    return generate_latest(MpsMetrics("test").registry).decode()


def exported_by_code() -> set[str]:
    """The sample names the three metrics registries declare, as `gputopo-agent run` (device
    plugin and MPS watch included), `gputopo-agent mps` and `gputopo-scheduler run` set them
    up; `_created` samples aside."""
    agent = AgentMetrics("test")
    agent.watch_device_plugin(dict, dict, lambda: True)
    scheduler = SchedulerMetrics("test")
    scheduler.watch_queues(dict)
    scheduler.watch_pending(dict)
    scheduler.watch_pending_age(dict)
    scheduler.watch_gpus(GpuCounts)
    names: set[str] = set()
    for registry in (agent.registry, scheduler.registry):
        names |= exported_names(generate_latest(registry).decode())
    names |= exported_names(mps_page())
    return {n for n in names if not n.endswith("_created")}


def readme_metrics() -> set[str]:
    """Every metric name in the README's `## Metrics` table (written out in full there)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `gputopo_")]
    return {
        name
        for row in rows
        for name in re.findall(r"`(gputopo_[a-z_]+)(?:\{[a-z_,]*\})?`", row.split(" | ")[0])
    }
