"""Both halves of GPU shares for end-to-end tests: the real agent process on a share node (see
`sharenode`) advertised as a ready Node, `gputopo-scheduler run` in a thread, and a kubelet loop
that admits every pod bound to the node through the kubelet emulator."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deviceplugin.testing.admission import Admission, EmulatedPod
from scheduler.cli.run import run
from tests.builders.scheduler import wait_for
from tests.builders.sharenode import GPU, NODE, REPLICAS, ShareNode, share_node

GPUS = 8


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


@contextmanager
def ready_share_node() -> Iterator[ShareNode]:
    """A share node whose agent runs, advertised as the kubelet would (its replicas on the
    Node), once the agent's NRT shows the shared GPU zones."""
    with share_node() as made:
        made.start_agent()
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
