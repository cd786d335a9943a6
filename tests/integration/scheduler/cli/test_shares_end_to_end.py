"""GPU shares end to end (DESIGN §12), both halves real: `gputopo-scheduler run` (its `run`
entry, in a thread) places share pods from the NRT the real agent process publishes, takes the
node's share lock, annotates and binds; a kubelet loop admits each bound pod through the kubelet
emulator, whose Allocate calls reach the agent's device plugin over gRPC; the agent answers with
the GPU the scheduler chose and releases the lock, so the next share pod for the node binds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.shares import ALLOCATED_ANNOTATION, GPU_COMPUTE, GPU_MEMORY, GPUS_ANNOTATION
from deviceplugin.allocation import VISIBLE_DEVICES
from tests.builders.scheduler import NAME, wait_for
from tests.builders.sharecluster import Kubelet, ready_share_node, running_scheduler
from tests.builders.sharenode import GPU, NODE, ShareNode, share_container, share_pod

GIB = 1 << 30


def _pod(name: str, *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict:
    return share_pod(name, *containers, init=init, scheduler=NAME)


@pytest.fixture(scope="module")
def node() -> Iterator[ShareNode]:
    with ready_share_node() as made:
        yield made


@pytest.fixture
def scheduler(node: ShareNode, tmp_path: Path) -> Iterator[None]:
    with running_scheduler(node, tmp_path):
        yield


def _annotations(node: ShareNode, name: str) -> dict[str, str]:
    return node.scheduler.get(name)["metadata"].get("annotations") or {}


def test_each_container_gets_the_gpu_the_scheduler_chose_and_shares_fit_their_gpus(
    node: ShareNode, scheduler: None
) -> None:
    bodies = [
        _pod("train", share_container("main", "40Gi")),
        _pod("infer-a", share_container("main", "20Gi", **{GPU_COMPUTE: "30"})),
        _pod("infer-b", share_container("main", "20Gi")),
        _pod(
            "pipeline",
            share_container("app-1", "10Gi"),
            share_container("app-2", "30Gi"),
            init=(share_container("setup", "10Gi"),),
        ),
        _pod("split", share_container("main", None)),  # a replica alone: an equal split
        _pod("big", share_container("main", "35Gi")),
    ]
    with Kubelet(node) as kubelet:
        for body in bodies:
            node.scheduler.create(body)
        names = [b["metadata"]["name"] for b in bodies]
        done = wait_for(lambda: all(n in kubelet.admitted for n in names), 20, "all admitted")
        assert done, sorted(kubelet.admitted)
        node.scheduler.wait_released(10)
    capacity = node.fake.get_object("noderesourcetopologies", NODE)
    used: dict[str, int] = {}
    for name in names:
        admission = kubelet.admitted[name]
        assert admission.error is None, (name, admission.error)
        chosen = json.loads(_annotations(node, name)[GPUS_ANNOTATION])
        given = {c: admission.env(c, GPU)[VISIBLE_DEVICES] for c in admission.devices}
        assert given == {c: chosen[c] for c in given}, name
        recorded = json.loads(_annotations(node, name)[ALLOCATED_ANNOTATION])
        assert recorded == {c: list(ids[GPU]) for c, ids in admission.devices.items()}
        for container in bodies[names.index(name)]["spec"]["containers"]:
            memory = container["resources"]["limits"].get(GPU_MEMORY)
            if memory is not None:
                uuid = chosen[container["name"]]
                used[uuid] = used.get(uuid, 0) + int(memory.removesuffix("Gi")) * GIB
    memory_of = {
        next(a["value"] for a in z["attributes"] if a["name"] == "uuid"): next(
            int(r["capacity"]) for r in z["resources"] if r["name"] == GPU_MEMORY
        )
        for z in capacity["zones"]
        if z["type"] == "GPU"
    }
    assert all(used[uuid] <= memory_of[uuid] for uuid in used), (used, memory_of)
    assert len(used) < len(names)  # shares pack: fewer GPUs than pods
