"""Recovery after API blips (issue 11, item 10): the NRT is current soon after the API server
answers again, and each failed attempt costs one log line. The real publisher and `KubeSink`, over
a client made from a kubeconfig file as the agent makes it (`load_api_client`), against the fake
API server: injected 500s and down periods."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.errors import PublishError
from agent.kube.client import KubeSink
from agent.kube.connect import load_api_client
from agent.kube.publisher import Publisher, PublisherSettings
from agent.metrics import AgentMetrics
from agent.nrt import GROUP, PLURAL, VERSION
from tests.builders.agentnode import NODE, NodeStateSource, gpu_available
from tests.builders.clock import FakeClock
from tests.builders.topology import gpu_pod, gpu_uuid
from tests.fakeapi import FakeApiServer

RECOVERY_S = 2.0
"""The issue's bound: the NRT is current this long after the API server answers again."""
NRT_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}/{NODE}"


@pytest.fixture
def sink(fake_api_with_crd: FakeApiServer, tmp_path: Path) -> Iterator[KubeSink]:
    api_client = load_api_client(fake_api_with_crd.write_kubeconfig(tmp_path / "kubeconfig"))
    yield KubeSink(api_client, timeout_s=5.0)
    api_client.close()  # type: ignore[no-untyped-call]


def toggle(source: NodeStateSource, round_: int) -> str:
    """Change the node state (GPU 0 taken on odd rounds); the `available` of zone node-0 now."""
    source.allocate(*([gpu_pod("ml", f"p{round_}", gpu_uuid(0))] if round_ % 2 else []))
    return "3" if round_ % 2 else "4"


def current(fake: FakeApiServer, available: str) -> bool:
    obj = fake.get_object("noderesourcetopologies", NODE)
    return obj is not None and gpu_available(obj) == available


def drive(publisher: Publisher, clock: FakeClock, until: Callable[[], bool], limit: float) -> None:
    """Run the publisher's loop on the fake clock (as `run()` does) until `until()` or `limit`;
    the clock stops at the step that made `until()` true."""
    while not until():
        assert clock.now < limit, "the publisher never caught up"
        wait = publisher.step()
        if not until():
            clock.advance(wait)


def failed_nrt_writes(fake: FakeApiServer) -> int:
    return len(fake.requests_matching("PATCH", NRT_PATH))


def test_after_injected_500s_the_nrt_is_current_within_a_second_of_recovery(
    sink, fake_api_with_crd
) -> None:
    fake, clock, source = fake_api_with_crd, FakeClock(), NodeStateSource()
    publisher = Publisher(PublisherSettings(node_name=NODE), sink, source, clock=clock)
    drive(publisher, clock, lambda: publisher.ready, clock.now + 5)
    staleness = []
    for failures in range(1, 41):  # 820 injected 500s, 40 recoveries
        fake.fail_next(failures, 500, path_regex=NRT_PATH, method="PATCH")
        want, writes_before = toggle(source, failures), failed_nrt_writes(fake)
        done = writes_before + failures
        drive(publisher, clock, lambda: failed_nrt_writes(fake) == done, 1e9)  # noqa: B023
        recovered = clock.now  # the last 500 was just answered: the server is back
        drive(publisher, clock, lambda: current(fake, want), recovered + 60)  # noqa: B023
        staleness.append(clock.now - recovered)
    print(f"stale after recovery: max {max(staleness):.2f}s over {len(staleness)} recoveries")
    assert max(staleness) <= 1.0


def test_after_an_outage_the_nrt_is_current_within_a_second_of_recovery(
    sink, fake_api_with_crd
) -> None:
    fake, clock, source = fake_api_with_crd, FakeClock(), NodeStateSource()
    publisher = Publisher(PublisherSettings(node_name=NODE), sink, source, clock=clock)
    drive(publisher, clock, lambda: publisher.ready, clock.now + 5)
    staleness = []
    for round_, outage_s in enumerate(x * 0.75 for x in range(1, 41)):  # 0.75 s .. 30 s
        fake.down()
        want, back_at = toggle(source, round_), clock.now + outage_s
        while clock.now < back_at:  # stop the fake clock at the very moment the server is back
            clock.advance(min(publisher.step(), back_at - clock.now))
        fake.up()
        drive(publisher, clock, lambda: current(fake, want), back_at + 60)  # noqa: B023
        staleness.append(clock.now - back_at)
    print(f"stale after recovery: max {max(staleness):.2f}s over {len(staleness)} outages")
    assert max(staleness) <= 1.0


def test_backoff_starts_over_after_a_success(sink, fake_api_with_crd) -> None:
    fake, clock, source = fake_api_with_crd, FakeClock(), NodeStateSource()
    publisher = Publisher(PublisherSettings(node_name=NODE), sink, source, clock=clock)
    drive(publisher, clock, lambda: publisher.ready, clock.now + 5)
    gaps = []
    for round_ in range(1, 3):
        fake.fail_next(4, 503, path_regex=NRT_PATH, method="PATCH")
        want, attempts = toggle(source, round_), []
        while not current(fake, want):
            writes_before, now = failed_nrt_writes(fake), clock.now
            wait = publisher.step()
            if failed_nrt_writes(fake) > writes_before:
                attempts.append(now)
            clock.advance(wait)
        gaps.append([round(b - a, 2) for a, b in itertools.pairwise(attempts)])
    assert gaps == [[0.5, 1.0, 1.0, 1.0]] * 2


def publisher_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "agent.kube.publisher"]


def test_run_is_current_within_2s_of_recovery_with_one_line_per_failure(
    sink, fake_api_with_crd, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    fake, source, metrics = fake_api_with_crd, NodeStateSource(), AgentMetrics()
    publisher = Publisher(PublisherSettings(node_name=NODE), sink, source, metrics=metrics)
    thread = threading.Thread(target=publisher.run)
    thread.start()
    staleness = []
    try:
        wait_until(lambda: publisher.ready, "the first publish")
        for round_ in range(1, 4):  # two 2-s outages, then six 500s
            if round_ < 3:
                fake.down()
                want = toggle(source, round_)
                threading.Event().wait(2.0)  # the outage itself
                fake.up()
                back_at = time.monotonic()
            else:
                writes_before = failed_nrt_writes(fake)
                fake.fail_next(6, 500, path_regex=NRT_PATH, method="PATCH")
                want = toggle(source, round_)
                wait_until(lambda: failed_nrt_writes(fake) - writes_before >= 6, "six 500s")  # noqa: B023
                back_at = time.monotonic()
            wait_until(lambda: current(fake, want), "the NRT to be current")  # noqa: B023
            staleness.append(time.monotonic() - back_at)
    finally:
        publisher.stop()
        thread.join(timeout=10)
    failed = metrics.registry.get_sample_value("gputopo_agent_publish_failures_total")
    print(f"stale after recovery: {', '.join(f'{s:.2f}s' for s in staleness)}; {failed} failures")
    assert max(staleness) < RECOVERY_S
    lines = [r for r in publisher_lines(caplog) if "publishing failed" in r.getMessage()]
    assert failed is not None
    assert len(lines) == failed >= 6
    assert [r for r in caplog.records if r.levelno >= logging.INFO and r.exc_info] == []
    assert urllib3_retries(caplog) == []


def test_a_failed_call_is_one_attempt_with_the_reason(sink, fake_api_with_crd, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    fake_api_with_crd.down()
    with pytest.raises(PublishError) as failure:
        sink.node(NODE)
    assert urllib3_retries(caplog) == []
    assert str(failure.value) == (
        f"reading Node {NODE}: API server {fake_api_with_crd.host} unreachable: Connection refused"
    )


def urllib3_retries(caplog) -> list[str]:
    """urllib3's own retry lines ("Retrying (Retry(total=2, ...)) after connection broken")."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("urllib3") and (r.levelno >= logging.WARNING or "Retry" in r.msg)
    ]


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    tick, deadline = threading.Event(), time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        tick.wait(0.01)
