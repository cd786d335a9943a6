"""A share pod's author edits its annotations, then gputopo-scheduler restarts (DESIGN §12
"Trust"), both halves real: the scheduler rebuilds each shared GPU's use from what the agent's NRT
says each running share uses (`sharePods`, from the agent's own record), not from the
annotation, so a GPU is never given more memory than it has. Each test has a node of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.inventory import load_inventory
from agent.shares import GPU_MEMORY, GPUS_ANNOTATION
from deviceplugin.allocation import VISIBLE_DEVICES
from deviceplugin.testing.admission import Admission
from tests.builders.scheduler import NAME, wait_for
from tests.builders.sharecluster import GPUS, Kubelet, ready_share_node, running_scheduler
from tests.builders.sharenode import FIXTURE, GPU, ShareNode, share_container, share_pod

GIB = 1 << 30
CAPACITY = load_inventory(FIXTURE).gpus[0].memory_mib << 20  # 80 GiB, every GPU alike


@pytest.fixture
def node() -> Iterator[ShareNode]:
    with ready_share_node() as made:
        yield made


def _memory_used(node: ShareNode, gpu: int) -> int | None:
    zone = node.gpu_zone(gpu) or {}
    line = next((r for r in zone.get("resources") or [] if r["name"] == GPU_MEMORY), None)
    return None if line is None else int(line["capacity"]) - int(line["available"])


def _given_per_gpu(admitted: dict[str, Admission], bodies: dict[str, dict]) -> dict[str, int]:
    """Bytes of memory each GPU's admitted shares were given (what the agent answered)."""
    used: dict[str, int] = {}
    for name, admission in admitted.items():
        assert admission.error is None, (name, admission.error)
        for container in bodies[name]["spec"]["containers"]:
            gpu = admission.env(container["name"], GPU)[VISIBLE_DEVICES]
            memory = int(container["resources"]["limits"][GPU_MEMORY].removesuffix("Gi"))
            used[gpu] = used.get(gpu, 0) + memory * GIB
    return used


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param("rewritten", id="gpus rewritten to another GPU"),
        pytest.param("deleted", id="gpus deleted"),
    ],
)
def test_an_edited_annotation_and_a_scheduler_restart_never_overcommit_a_gpu(
    node: ShareNode, tmp_path: Path, edit: str
) -> None:
    """A running 50Gi share's author edits its `gputopo.io/gpus`; after a scheduler restart,
    16 shares of 30Gi (two fit a GPU beside nothing, one beside the 50Gi: 15 in all) never put
    more on its GPU than the GPU has, and the one that does not fit waits."""
    bodies = {"held": share_pod("held", share_container("main", "50Gi"), scheduler=NAME)}
    for i in range(16):
        bodies[f"fill-{i}"] = share_pod(
            f"fill-{i}", share_container("main", "30Gi"), scheduler=NAME
        )
    with Kubelet(node) as kubelet:
        with running_scheduler(node, tmp_path):
            node.scheduler.create(bodies["held"])
            wait_for(lambda: "held" in kubelet.admitted, 20, "held admitted")
            node.scheduler.wait_released(10)
        held_gpu = kubelet.admitted["held"].env("main", GPU)[VISIBLE_DEVICES]
        index = next(i for i in range(GPUS) if node.uuid(i) == held_gpu)
        wait_for(lambda: _memory_used(node, index) == 50 * GIB, 15, "the NRT counting held")
        value = json.dumps({"main": node.uuid((index + 1) % GPUS)}) if edit == "rewritten" else None
        node.scheduler.core.patch_namespaced_pod(
            "held", "default", {"metadata": {"annotations": {GPUS_ANNOTATION: value}}},
            _content_type="application/merge-patch+json", _preload_content=False,
        )  # fmt: skip
        with running_scheduler(node, tmp_path):
            for name, body in bodies.items():
                if name != "held":
                    node.scheduler.create(body)
            wait_for(lambda: len(kubelet.admitted) == 16, 30, "the 15 shares that fit admitted")
            node.scheduler.wait_released(10)
            bound = [n for n in bodies if node.scheduler.get(n)["spec"].get("nodeName")]
    used = _given_per_gpu(kubelet.admitted, bodies)
    assert max(used.values()) <= CAPACITY, {g: u / GIB for g, u in used.items()}
    assert used[held_gpu] == 80 * GIB  # the 50Gi and one 30Gi
    assert len(bound) == 16  # held and 15 fills; the last one waits
