"""The README's share pod (section "Share a GPU"): a valid Pod that gputopo-scheduler, and only
it, takes, asking one sized share; every README snippet that asks a sized share names the
scheduler (the stock one would answer `Insufficient gputopo.io/gpu-memory` forever)."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import yaml

from agent.shares import GPU_COMPUTE, GPU_MEMORY
from scheduler.runtime.cluster.podinfo import read_pod

README = Path(__file__).resolve().parents[4] / "README.md"
SCHEDULER = "gputopo-scheduler"


def _snippets() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def test_every_snippet_asking_a_sized_share_names_gputopo_scheduler() -> None:
    sized = [s for s in _snippets() if GPU_MEMORY in s or GPU_COMPUTE in s]
    assert sized
    assert [s for s in sized if f"schedulerName: {SCHEDULER}" not in s] == []


def test_the_share_pod_is_valid_and_gputopo_scheduler_takes_one_sized_share() -> None:
    (pod,) = [
        doc
        for s in _snippets()
        for doc in yaml.safe_load_all(s)
        if isinstance(doc, dict) and doc.get("kind") == "Pod" and GPU_MEMORY in s
    ]
    kubernetes_validate.validate(pod, "1.30", strict=True)
    info = read_pod({**pod, "metadata": {**pod["metadata"], "namespace": "default"}}, SCHEDULER)
    assert info.ours
    assert info.error is None
    (share,) = info.request.shares
    assert (share.memory_bytes, share.compute_percent) == (20 * 1024**3, 40)
