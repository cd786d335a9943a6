"""`gputopo-scheduler run` end to end: flags and environment, the API, bind, clean stop."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from scheduler.cli.run import run
from scheduler.cli.runtime import Runtime
from scheduler.kubeapi.client import KubeClient
from scheduler.kubeapi.workloads import VERSIONS
from tests.builders.scheduler import (
    NAME,
    create_pod,
    gpu_node,
    node_of,
    pod_body,
    settings,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[4]


def kubeconfig(fake_api) -> str:
    return str(fake_api.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig"))


@pytest.fixture
def restore_logging():
    """`run` configures the root logger for the process; put pytest's set-up back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lists(fake_api, path: str) -> int:
    """How many lists (not watches) of `path` the fake API server answered."""
    return sum(1 for r in fake_api.requests_matching("GET", f"^{path}$") if "watch" not in r.query)


def _run_until_bound(fake_api, core_v1, argv: list[str], env: dict[str, str]) -> list[int]:
    gpu_node(fake_api, "n1")
    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run(argv, env, stop)), daemon=True)
    thread.start()
    try:
        create_pod(core_v1, pod_body("p", gpus=1))
        assert wait_for(lambda: node_of(fake_api, "p"), 10, "p bound") == "n1"
    finally:
        stop.set()
        thread.join(10)
    return codes


def test_run_binds_and_stops(fake_api, core_v1, restore_logging):
    env = {"GPUTOPO_METRICS_ADDRESS": "127.0.0.1:0", "GPUTOPO_KUBECONFIG": kubeconfig(fake_api)}
    assert _run_until_bound(fake_api, core_v1, [], env) == [0]


def test_the_first_lists_go_out_once_before_the_settings_are_read(
    fake_api, core_v1, restore_logging
):
    argv = ["--kubeconfig", kubeconfig(fake_api), "--metrics-address", "127.0.0.1:0"]
    assert _run_until_bound(fake_api, core_v1, argv, {}) == [0]
    assert (_lists(fake_api, "/api/v1/nodes"), _lists(fake_api, "/api/v1/pods")) == (1, 1)
    discovery = ["/apis/resource.k8s.io/v1", *(f"/apis/scheduling.k8s.io/{v}" for v, _ in VERSIONS)]
    assert [_lists(fake_api, path) for path in discovery] == [1] * len(discovery)


def test_a_config_files_scheduler_name_reads_its_own_lease(
    fake_api, core_v1, restore_logging, tmp_path
):
    """The Lease read sent early is the default name's; the config file names another, whose
    Lease the start-up check then reads (the early answer is not taken for it)."""
    config = tmp_path / "scheduler.yaml"
    config.write_text("version: v1\nschedulerName: other\n", encoding="utf-8")
    argv = ["--config", str(config), "--kubeconfig", kubeconfig(fake_api)]
    env = {"GPUTOPO_METRICS_ADDRESS": "127.0.0.1:0"}
    gpu_node(fake_api, "n1")
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(argv, env, stop), daemon=True)
    thread.start()
    try:
        create_pod(core_v1, pod_body("p", gpus=1, scheduler="other"))
        assert wait_for(lambda: node_of(fake_api, "p"), 10, "p bound") == "n1"
    finally:
        stop.set()
        thread.join(10)
    leases = "/apis/coordination.k8s.io/v1/namespaces/gputopo-system/leases"
    assert _lists(fake_api, f"{leases}/gputopo-scheduler") == 1  # the early read, never taken
    assert _lists(fake_api, f"{leases}/other") >= 1


def test_a_config_files_kubeconfig_replaces_the_early_connection(
    fake_api, core_v1, restore_logging, tmp_path, monkeypatch
):
    """Without a flag or GPUTOPO_KUBECONFIG the early lists go where kubectl's order points
    ($KUBECONFIG: here a server nobody answers on); the config file names another kubeconfig,
    which the scheduler then uses, its lists sent again there."""
    nowhere = tmp_path / "nowhere"
    nowhere.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("KUBECONFIG", str(nowhere))
    config = tmp_path / "scheduler.yaml"
    config.write_text(f"version: v1\nkubeconfig: {kubeconfig(fake_api)}\n", encoding="utf-8")
    argv = ["--config", str(config), "--metrics-address", "127.0.0.1:0"]
    assert _run_until_bound(fake_api, core_v1, argv, {}) == [0]
    assert (_lists(fake_api, "/api/v1/nodes"), _lists(fake_api, "/api/v1/pods")) == (1, 1)


def test_unreachable_kubeconfig_server_is_one_line(tmp_path, capsys):
    assert run(["--kubeconfig", str(tmp_path / "missing")], {}) == 2
    err = capsys.readouterr().err
    assert err == f"gputopo-scheduler run: --kubeconfig: no such file: {tmp_path / 'missing'}\n"


@pytest.mark.slow
def test_process_stops_cleanly_on_sigterm(fake_api, core_v1):
    gpu_node(fake_api, "n1")
    env = {**os.environ, "GPUTOPO_METRICS_ADDRESS": "127.0.0.1:0", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "scheduler.cli", "run", "--log-format", "json"]
    proc = subprocess.Popen(
        [*command, "--kubeconfig", kubeconfig(fake_api)],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        create_pod(core_v1, pod_body("p", gpus=1))
        assert wait_for(lambda: node_of(fake_api, "p"), 25, "p bound by the process") == "n1"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # never leave a scheduler behind when the test fails
            _, err = proc.communicate()
            raise
    assert proc.returncode == 0
    assert '"msg": "stopping"' in err


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.05, 0.2])
def test_stop_is_prompt_at_any_point_of_start_up(fake_api, delay):
    kube = KubeClient(fake_api.api_client(), "s", "i")
    runtime = Runtime(settings(), kube, watch_timeout=300)
    runtime.start()
    time.sleep(delay)  # stop while the informers list, open their watches, or watch
    started = time.monotonic()
    runtime.stop()
    took = time.monotonic() - started
    kube.close()
    assert took < 2.0


def test_the_collector_is_off_until_every_collection_synced(fake_api, core_v1):
    """As the `run` command starts it: the cyclic collector is off while the lists come in
    (the pods' first list fails, its retry comes a second later), then on with what was alive
    frozen; after the stop it is on and nothing is frozen."""
    gpu_node(fake_api, "n1")
    create_pod(core_v1, pod_body("p", gpus=1))
    fake_api.fail_next(1, 500, path_regex=r"/pods$", method="GET")
    kube = KubeClient(fake_api.api_client(), NAME, "i")
    runtime = Runtime(settings(), kube, pause_gc=True)
    try:
        runtime.start()
        off_while_listing = not gc.isenabled() and not runtime.ready()
        wait_for(lambda: node_of(fake_api, "p"), 10, "p bound")
        on_and_frozen = gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        runtime.stop()
        kube.close()
        after_stop = (gc.isenabled(), gc.get_freeze_count())
        gc.enable()
        gc.unfreeze()
    assert off_while_listing
    assert on_and_frozen
    assert after_stop == (True, 0)
