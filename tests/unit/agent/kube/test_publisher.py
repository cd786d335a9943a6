"""The publisher's parts that need no API server: the `--dry-run` sink and the terminal-pod filter
(over a plain function). The loop itself runs against the fake API server in
tests/integration/agent/kube/test_publisher.py."""

from __future__ import annotations

import io
import logging

import yaml

from agent.errors import PublishError
from agent.kube.node_pods import TerminalPodFilter
from agent.kube.publisher import DryRunSink, Publisher, PublisherSettings
from agent.labels import PRESENT
from tests.builders.agentnode import NODE, NodeStateSource
from tests.builders.clock import FakeClock


def test_dry_run_prints_yaml_documents() -> None:
    out = io.StringIO()
    pub = Publisher(PublisherSettings(node_name=NODE), DryRunSink(out), NodeStateSource())
    pub.publish_once()
    docs = list(yaml.safe_load_all(out.getvalue()))
    assert [d["kind"] for d in docs] == ["NodeResourceTopology", "Node"]
    assert docs[0]["metadata"] == {"name": NODE}
    assert docs[1]["metadata"]["labels"][PRESENT] == "true"


def test_dry_run_says_it_would_publish(caplog) -> None:
    caplog.set_level(logging.INFO, logger="agent.kube.publisher")
    settings = PublisherSettings(node_name=NODE, dry_run=True)
    Publisher(settings, DryRunSink(io.StringIO()), NodeStateSource()).publish_once()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "publish" in r.getMessage()]
    assert said == [("INFO", f"would publish NodeResourceTopology {NODE} (--dry-run)")]


def test_terminal_pod_filter_refreshes_on_unseen_pods_and_ttl() -> None:
    clock = FakeClock()
    phases = {("a", "done"): "Succeeded", ("a", "run"): "Running"}
    lists = []
    api_down = False

    def source():
        lists.append(clock.now)
        if api_down:
            raise PublishError("down")
        return dict(phases)

    is_terminal = TerminalPodFilter(source, clock=clock, ttl_s=60, min_interval_s=5)
    assert is_terminal("a", "done")
    assert not is_terminal("a", "run")
    assert len(lists) == 1
    phases[("a", "run")] = "Failed"
    phases[("a", "new")] = "Running"
    assert not is_terminal("a", "new")  # unseen, but within min_interval: no new list
    clock.advance(6)
    assert not is_terminal("a", "other")  # unseen: list again
    assert is_terminal("a", "run")
    assert len(lists) == 2
    clock.advance(61)
    api_down = True
    assert is_terminal("a", "run")  # API down: the last answer stands
    assert len(lists) == 3
