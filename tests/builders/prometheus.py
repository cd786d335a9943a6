"""A real Prometheus server (Debian's `prometheus` package) for the tests: started on a free port
with a generated config, scraping given targets every second and evaluating rule files every
second; queried over its HTTP API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.builders.scheduler import wait_for

PROMETHEUS = "prometheus"
PROMTOOL = "promtool"
START_TIMEOUT_S = 60.0


def binary(name: str) -> str | None:
    """The path of `prometheus` or `promtool`: /usr/bin first (the Debian package), else PATH."""
    debian = Path("/usr/bin") / name
    return str(debian) if debian.is_file() else shutil.which(name)


@dataclass(frozen=True, slots=True)
class Target:
    """One scrape job: its name, `host:port` and the labels added to its series."""

    job: str
    address: str
    labels: Mapping[str, str]


def config(targets: Sequence[Target], rule_files: Sequence[Path]) -> dict[str, Any]:
    """Targets of one job (two replicas of a Deployment) are one scrape job, as a PodMonitor's."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append({"targets": [t.address], "labels": dict(t.labels)})
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": static} for job, static in jobs.items()
        ],
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrometheusServer:
    """`GET` helpers over a started server's API (`/api/v1/...`)."""

    def __init__(self, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
        self.port, self.process, self.log = port, process, log

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"http://127.0.0.1:{self.port}{path}{query}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            body = json.loads(reply.read())
        if body.get("status") != "success":
            raise AssertionError(f"GET {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector `expr` evaluates to now (its series)."""
        data = self.get("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.get("/api/v1/alerts")["alerts"]
        return alerts

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self.get("/api/v1/rules")["groups"] for r in g["rules"]]

    def healthy_targets(self) -> set[str]:
        active = self.get("/api/v1/targets")["activeTargets"]
        return {t["labels"]["job"] for t in active if t["health"] == "up"}

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False


@contextmanager
def prometheus(
    executable: str, targets: Sequence[Target], rule_files: Sequence[Path] = ()
) -> Iterator[PrometheusServer]:
    """A started Prometheus with its own TSDB in a temporary directory; stopped and removed on
    exit. AssertionError (with its log) when it exits or is not ready in START_TIMEOUT_S."""
    workdir = Path(tempfile.mkdtemp(prefix="gputopo-prometheus-", dir="/tmp"))
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config(targets, rule_files)), encoding="utf-8")
    port, log = free_port(), workdir / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                executable,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = PrometheusServer(port, process, log)
    try:
        wait_for(server._ready, START_TIMEOUT_S, "prometheus ready")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        shutil.rmtree(workdir, ignore_errors=True)
