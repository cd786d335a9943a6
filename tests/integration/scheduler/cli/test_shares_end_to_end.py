"""GPU shares end to end (DESIGN §12), both halves real: `gputopo-scheduler run` (its `run`
entry, in a thread) places share pods from the NRT the real agent process publishes, takes the
node's share lock, annotates and binds; a kubelet loop admits each bound pod through the kubelet
emulator, whose Allocate calls reach the agent's device plugin over gRPC; the agent answers with
the GPU the scheduler chose and releases the lock, so the next share pod for the node binds."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.inventory import load_inventory
from agent.shares import ALLOCATED_ANNOTATION, GPU_COMPUTE, GPU_MEMORY, GPUS_ANNOTATION
from deviceplugin.allocation import VISIBLE_DEVICES
from deviceplugin.testing.admission import Admission, EmulatedPod
from scheduler.cli.run import run
from tests.builders.scheduler import NAME, wait_for
from tests.builders.sharenode import (
    FIXTURE,
    GPU,
    NODE,
    REPLICAS,
    ShareNode,
    share_container,
    share_node,
    share_pod,
)

GIB = 1 << 30
GPUS = 8


def _pod(name: str, *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict:
    return share_pod(name, *containers, init=init, scheduler=NAME)


class Kubelet:
    """Admits every pod bound to the node, once, in the order the binds are seen."""

    def __init__(self, node: ShareNode) -> None:
        self.node = node
        self.admitted: dict[str, Admission] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            for pod in self.node.fake.list_objects("pods"):
                name = pod["metadata"]["name"]
                if (pod.get("spec") or {}).get("nodeName") == NODE and name not in self.admitted:
                    (done,) = self.node.admitter.admit(EmulatedPod.from_manifest(pod))
                    self.admitted[name] = done

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture(scope="module")
def node() -> Iterator[ShareNode]:
    with share_node() as made:
        made.start_agent()
        # The kubelet advertises the plugin's replicas on the Node, as a real one does.
        replicas = str(GPUS * REPLICAS)
        made.fake.make_node_ready(
            NODE,
            {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: replicas},
            {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: replicas},
        )
        shared = wait_for(
            lambda: (
                made.gpu_zone(GPUS - 1)
                and any(a["name"] == "sharing" for a in made.gpu_zone(GPUS - 1)["attributes"])
            ),
            20,
            "the agent's NRT with shared GPU zones",
        )
        assert shared
        yield made


@contextmanager
def running_scheduler(node: ShareNode, folder: Path) -> Iterator[None]:
    """`gputopo-scheduler run` in a thread until the block ends (a fresh cache each time)."""
    kubeconfig = node.fake.write_kubeconfig(folder / "kubeconfig")
    env = {"GPUTOPO_METRICS_ADDRESS": "127.0.0.1:0", "GPUTOPO_KUBECONFIG": str(kubeconfig)}
    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(run([], env, stop)), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(15)
    assert codes == [0]


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


def _memory_used(node: ShareNode, gpu: int) -> int | None:
    zone = node.gpu_zone(gpu) or {}
    line = next((r for r in zone.get("resources") or [] if r["name"] == GPU_MEMORY), None)
    return None if line is None else int(line["capacity"]) - int(line["available"])


def _given_per_gpu(admitted: dict[str, Admission], bodies: dict[str, dict]) -> dict[str, int]:
    """Bytes of memory each GPU's admitted shares were given (what the agent answered)."""
    used: dict[str, int] = {}
    for name, admission in admitted.items():
        if admission.error is not None:
            continue
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
    16 shares of 30Gi (two fit a GPU beside nothing, one beside the 50Gi) never put more on its
    GPU than the GPU has: the NRT's count of what the agent gave holds its 50Gi there."""
    bodies = {"held": _pod("held", share_container("main", "50Gi"))}
    bodies |= {f"fill-{i}": _pod(f"fill-{i}", share_container("main", "30Gi")) for i in range(16)}
    with Kubelet(node) as kubelet:
        with running_scheduler(node, tmp_path):
            node.scheduler.create(bodies["held"])
            wait_for(lambda: "held" in kubelet.admitted, 20, "held admitted")
            node.scheduler.wait_released(10)
        held_gpu = kubelet.admitted["held"].env("main", GPU)[VISIBLE_DEVICES]
        index = next(i for i in range(GPUS) if node.uuid(i) == held_gpu)
        wait_for(lambda: _memory_used(node, index) == 50 * GIB, 15, "the NRT counting held")
        other = node.uuid((index + 1) % GPUS)
        value = json.dumps({"main": other}) if edit == "rewritten" else None
        node.scheduler.core.patch_namespaced_pod(
            "held", "default", {"metadata": {"annotations": {GPUS_ANNOTATION: value}}},
            _content_type="application/merge-patch+json", _preload_content=False,
        )  # fmt: skip
        with running_scheduler(node, tmp_path):
            for name, body in bodies.items():
                if name != "held":
                    node.scheduler.create(body)
            wait_for(lambda: len(kubelet.admitted) >= 15, 30, "the shares that fit admitted")
            node.scheduler.wait_released(10)
    used = _given_per_gpu(kubelet.admitted, bodies)
    capacity = load_inventory(FIXTURE).gpus[0].memory_mib << 20
    try:
        assert max(used.values()) <= capacity, {g: u / GIB for g, u in used.items()}
        assert used[held_gpu] == 80 * GIB  # the 50Gi and one 30Gi
    finally:
        for admission in kubelet.admitted.values():
            node.admitter.remove(admission.pod)
        for name in bodies:
            node.scheduler.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        node.fake.complete_pod_deletions()
