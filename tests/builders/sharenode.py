"""A GPU node for share tests: the real agent process serving time-sliced GPUs to the kubelet
emulator (pod admission, PodResources), talking to the fake API server; and the scheduler's part
of the share contract (lock, annotation, bind) played through the real client."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.inventory import load_inventory
from agent.model import GpuUuid
from agent.mps.layout import MpsLayout
from agent.mps.status import DaemonStatus, MpsStatus, write_status
from agent.shares import (
    DEFAULT_SCHEDULER_NAME,
    DEFAULT_SHARE_LOCK_NAMESPACE,
    GPU_MEMORY,
    GPUS_ANNOTATION,
    LEASE_SHARES_ANNOTATION,
    LOCK_POD_ANNOTATION,
    LeaseShare,
    encode_gpus,
    encode_lease_shares,
    pod_shares,
    share_lock_name,
)
from deviceplugin.testing.admission import EmulatedPod, PodAdmitter
from deviceplugin.testing.kubelet import KubeletEmulator
from deviceplugin.testing.podresources_server import FakePodResourcesServer
from tests.builders.scheduler import wait_for
from tests.builders.topology import allocatable_of
from tests.fakeapi import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]
NODE = "share-node"
GPU = "nvidia.com/gpu"
FIXTURE = "dgx-a100"
REPLICAS = 4


def share_config(folder: Path, *, mode: str = "timeSlicing", replicas: int = REPLICAS) -> Path:
    path = folder / "agent.yaml"
    path.write_text(
        f"version: v1\nsharing:\n  {mode}:\n    resources:\n"
        f"    - name: {GPU}\n      replicas: {replicas}\n",
        encoding="utf-8",
    )
    return path


def share_container(name: str, memory: str | None = "10Gi", **extra: str) -> dict[str, Any]:
    limits = {GPU: "1", **({GPU_MEMORY: memory} if memory else {}), **extra}
    return {
        "name": name,
        "image": "registry.example/cuda:12",
        "resources": {"limits": limits, "requests": dict(limits)},
    }


def share_pod(
    name: str,
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    scheduler: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers or (share_container("main"),))}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if init:
        spec["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


@dataclass
class ShareScheduler:
    """The scheduler's half of the contract, through the real client."""

    core: client.CoreV1Api
    coordination: client.CoordinationV1Api
    node: str = NODE
    namespace: str = DEFAULT_SHARE_LOCK_NAMESPACE

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        namespace = body["metadata"]["namespace"]
        response = self.core.create_namespaced_pod(namespace, dict(body), _preload_content=False)
        return dict(_json(response))

    def lease(self) -> dict[str, Any] | None:
        try:
            response = self.coordination.read_namespaced_lease(
                share_lock_name(self.node), self.namespace, _preload_content=False
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(_json(response))

    def holder(self) -> str | None:
        lease = self.lease()
        return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")

    def take_lock(
        self,
        pod: Mapping[str, Any],
        gpus: Mapping[str, str] | None = None,
        seconds: int = 30,
        *,
        renewed: datetime | None = None,
        steal: bool = False,
    ) -> None:
        """Take the lock for `pod` as the scheduler does: the Lease names it and gives each
        share container in `gpus` its GPU and the size the pod asks (an equal split when it
        asks none); `renewed`: the Lease's renewTime (now by default); `steal`: take it from a
        holder whose lock expired, as the scheduler may."""
        meta = pod["metadata"]
        now = (renewed or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": meta["uid"], "leaseDurationSeconds": seconds,
                "acquireTime": now, "renewTime": now}  # fmt: skip
        annotations = {
            LOCK_POD_ANNOTATION: f"{meta['namespace']}/{meta['name']}",
            LEASE_SHARES_ANNOTATION: encode_lease_shares(lease_shares(pod, gpus or {})),
        }
        lease = self.lease()
        if lease is None:
            body = {"metadata": {"name": share_lock_name(self.node), "annotations": annotations},
                    "spec": spec}  # fmt: skip
            self.coordination.create_namespaced_lease(
                self.namespace,
                body,
                _preload_content=False,  # type: ignore[arg-type]
            )
            return
        assert steal or not (lease.get("spec") or {}).get("holderIdentity"), "the lock is held"
        lease["spec"] = spec
        lease["metadata"]["annotations"] = annotations
        self.coordination.replace_namespaced_lease(
            share_lock_name(self.node), self.namespace, lease,  # type: ignore[arg-type]
            _preload_content=False,
        )  # fmt: skip

    def clear_lock(self) -> None:
        """Release the lock as a failed bind does (its pod gone before any Allocate)."""
        lease = self.lease()
        if lease is None:
            return
        lease["spec"].pop("holderIdentity", None)
        lease["metadata"]["annotations"] = {}
        self.coordination.replace_namespaced_lease(
            share_lock_name(self.node), self.namespace, lease,  # type: ignore[arg-type]
            _preload_content=False,
        )  # fmt: skip

    def annotate(self, pod: Mapping[str, Any], gpus: Mapping[str, str]) -> None:
        meta = pod["metadata"]
        self.core.patch_namespaced_pod(
            meta["name"], meta["namespace"],
            {"metadata": {"annotations": {GPUS_ANNOTATION: encode_gpus(gpus)}}},
            _content_type="application/merge-patch+json", _preload_content=False,
        )  # fmt: skip

    def bind(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}}  # fmt: skip
        self.core.create_namespaced_pod_binding(
            meta["name"],
            meta["namespace"],
            binding,
            _preload_content=False,  # type: ignore[arg-type]
        )
        return self.get(meta["name"], meta["namespace"])

    def place(
        self, body: Mapping[str, Any], gpus: Mapping[str, str], *, renewed: datetime | None = None
    ) -> EmulatedPod:
        """Create (as gputopo-scheduler's pod), lock, annotate, bind: the pod as the kubelet
        then sees it (`renewed`: the Lease's renewTime, now by default)."""
        spec = {"schedulerName": DEFAULT_SCHEDULER_NAME, **body["spec"]}
        pod = self.create({**body, "spec": spec})
        self.take_lock(pod, gpus, renewed=renewed)
        self.annotate(pod, gpus)
        return EmulatedPod.from_manifest(self.bind(pod))

    def bind_unplaced(self, body: Mapping[str, Any]) -> EmulatedPod:
        """A pod another scheduler placed: bound, with no lock and no annotation."""
        return EmulatedPod.from_manifest(self.bind(self.create(body)))

    def get(self, name: str, namespace: str = "default") -> dict[str, Any]:
        response = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        return dict(_json(response))

    def wait_released(self, timeout_s: float = 5.0) -> None:
        wait_for(lambda: self.holder() is None, timeout_s, "the share lock's release")


def lease_shares(pod: Mapping[str, Any], gpus: Mapping[str, str]) -> dict[str, LeaseShare]:
    """What the scheduler gives each share container of `pod` named in `gpus`: its GPU and the
    memory and compute it asks (an equal split of the fixture's GPU when it asks no memory)."""
    inventory = load_inventory(FIXTURE)
    memory = {str(g.uuid): g.memory_mib * 1024 * 1024 for g in inventory.gpus}
    out: dict[str, LeaseShare] = {}
    for share in pod_shares(pod, {GPU}):
        gpu = gpus.get(share.container)
        if gpu is None:
            continue
        split = memory.get(gpu, 80 * 1024**3) // REPLICAS * share.replicas
        out[share.container] = LeaseShare(
            gpu=GpuUuid(gpu),
            memory_bytes=share.memory_bytes or split,
            compute_percent=share.compute_percent,
        )
    return out


def _json(response: Any) -> Any:
    import json

    return json.loads(response.data)


@dataclass
class ShareNode:
    fake: FakeApiServer
    kubelet: KubeletEmulator
    podresources: FakePodResourcesServer
    admitter: PodAdmitter
    scheduler: ShareScheduler
    folder: Path
    config: Path
    replicas: int = REPLICAS
    mps_root: Path | None = None  # under sharing.mps: where `gputopo-agent mps` would write
    agent: subprocess.Popen[str] | None = None

    @property
    def record_path(self) -> Path:
        """The agent's share record (what it gave each share container)."""
        return self.folder / "state" / "shares.json"

    def uuid(self, gpu: int) -> str:
        return str(load_inventory(FIXTURE).gpus[gpu].uuid)

    def start_agent(self, *extra: str) -> None:
        kubeconfig = self.fake.write_kubeconfig(self.folder / "kubeconfig")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUTOPO_", "NODE_NAME"))}
        command = [
            sys.executable, "-m", "agent.cli", "run", "--node-name", NODE,
            "--nvml-fixture", FIXTURE, "--allow-fake-gpus", "--config", str(self.config),
            "--device-plugin-dir", str(self.kubelet.plugin_dir),
            "--pod-resources-socket", str(self.podresources.socket),
            "--kubeconfig", str(kubeconfig), "--kubelet-config", "/nonexistent",
            "--node-labels", "off", "--metrics-address", "127.0.0.1:0",
            "--share-record", str(self.record_path),
            *(("--mps-root", str(self.mps_root)) if self.mps_root else ()), *extra,
        ]  # fmt: skip
        self.agent = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
        )
        registered = self.kubelet.wait_for(
            lambda k: k.connected(GPU) and len(k.healthy(GPU)) == 8 * self.replicas, 30.0
        )
        assert registered, "the agent did not register its shared GPUs"
        self.admitter.sync_allocatable()

    def gpu_zone(self, gpu: int) -> dict[str, Any] | None:
        """The GPU zone of the published NodeResourceTopology (None before it is published)."""
        obj = self.fake.get_object("noderesourcetopologies", NODE)
        zones = (obj or {}).get("zones") or []
        return next((z for z in zones if z["name"] == f"gpu-{gpu}"), None)

    def stop_agent(self) -> str:
        """Stop the agent; its stderr."""
        assert self.agent is not None
        self.agent.terminate()
        _, err = self.agent.communicate(timeout=15)
        self.agent = None
        return err


MPS_USERS = (0, 1000, 1234)


def mps_serving(root: Path, users: tuple[int, ...] = MPS_USERS) -> Path:
    """An MPS root whose status file says the daemons of `users` serve; dated an hour ahead, so
    it stays fresh with no supervisor rewriting it (the device plugin marks the shares Unhealthy
    else)."""
    root.mkdir(parents=True, exist_ok=True)
    daemons = tuple(DaemonStatus(uid=uid, up=True) for uid in users)
    status = MpsStatus(written_at=time.time() + 3600, gpus=(), daemons=daemons)
    write_status(MpsLayout(root).status_file, status)
    return root


@contextmanager
def share_node(*, mode: str = "timeSlicing", replicas: int = REPLICAS) -> Iterator[ShareNode]:
    """A fake API server (with the lock's namespace and the node), the kubelet emulator and its
    PodResources server, and the agent process serving shared GPUs; all stopped afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="share-", dir="/tmp"))
    with FakeApiServer() as fake, KubeletEmulator() as kubelet, FakePodResourcesServer() as podres:
        fake.put_object("namespaces", {"metadata": {"name": DEFAULT_SHARE_LOCK_NAMESPACE}})
        fake.add_node(NODE, capacity={"cpu": "64", "memory": "512Gi", "pods": "110"})
        podres.set_allocatable(allocatable_of(load_inventory(FIXTURE)))
        api = fake.api_client()
        scheduler = ShareScheduler(client.CoreV1Api(api), client.CoordinationV1Api(api))
        node = ShareNode(
            fake=fake, kubelet=kubelet, podresources=podres,
            admitter=PodAdmitter(kubelet, podres), scheduler=scheduler, folder=folder,
            config=share_config(folder, mode=mode, replicas=replicas), replicas=replicas,
            mps_root=mps_serving(folder / "mps") if mode == "mps" else None,
        )  # fmt: skip
        try:
            yield node
        finally:
            if node.agent is not None:
                node.agent.kill()
                node.agent.communicate(timeout=15)
            api.close()  # type: ignore[no-untyped-call]
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)
