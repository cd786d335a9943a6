"""`kubectl gputopo nodes` shows what GPUs really use beside what pods requested (issue 47): the
real plugin and client against the fake API server, reading an NRT with measured use."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

from agent.cli import kubectl as kubectl_plugin
from agent.gpu_load import GpuLoad, load_attributes
from tests.builders.nrt import make_shared_nrt
from tests.builders.topology import dgx_h100
from tests.fakeapi import FakeApiServer

WALL = 1_764_600_000.0  # 2025-12-01T14:40:00Z


def _nrt_with_use() -> dict:
    body = make_shared_nrt("n1", dgx_h100(), shared=(0, 1), slots=4)
    uses = {0: (71_680, 93), 1: (0, 0), 4: (20_480, 40)}
    for gpu, (mib, sm) in uses.items():
        load = GpuLoad(memory_used_mib=mib, sm_percent=sm, power_w=300, measured_at=WALL)
        zone = next(z for z in body["zones"] if z["name"] == f"gpu-{gpu}")
        zone["attributes"] += [{"name": k, "value": v} for k, v in load_attributes(load)]
    return body


def _run(*argv: str) -> str:
    with FakeApiServer() as fake:
        fake.put_object("noderesourcetopologies", _nrt_with_use())
        kubeconfig = fake.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig")
        out, err = io.StringIO(), io.StringIO()
        code = kubectl_plugin.main([*argv, "--kubeconfig", str(kubeconfig)], out=out, err=err)
    assert code == 0, err.getvalue()
    return out.getvalue()


def test_nodes_shows_measured_use_beside_requests() -> None:
    text = _run("nodes")
    header, row = text.splitlines()[:2]
    assert "SHARES FREE (GPU:FREE/OF)" in header
    assert "MEASURED USE (GPU:USED/OF SM)" in header
    assert row.endswith("0:70/80Gi 93%,4:20/80Gi 40%,1-idle")
    assert "oldest reading 2025-12-01T14:40:00Z" in text


def test_nodes_json_has_each_reading() -> None:
    summary = json.loads(_run("nodes", "-o", "json"))
    measured = summary["nodes"][0]["measured"]
    assert measured[0] == {
        "gpu": 0,
        "memoryUsedMiB": 71_680,
        "memoryMiB": dgx_h100().gpus[0].memory_mib,
        "smPercent": 93,
        "powerW": 300,
        "measuredAt": "2025-12-01T14:40:00Z",
    }
