"""The demo on an embedded default: no GPU and no cluster needed (`bash scripts/demo.sh`).

1. A simulated DGX A100 with MIG (NVML answered by the fake `pynvml` from the `dgx-a100-mig`
   fixture) runs the real agent services — device plugins over gRPC unix sockets, the NRT
   publisher, metrics — against the package's kubelet emulator and a PodResources server.
   It prints the advertised resources, one NVLink-aware allocation, and the NodeResourceTopology.
2. One scripted Xid turns a GPU Unhealthy, live in the kubelet's view and in the NRT; after the
   quiet period it is Healthy again.
3. The scheduler's placement code replays the fragmentation and deadlock scenarios and a
   rack-local gang on a simulated cluster, next to the stock scheduler's behaviour.

This module is CLI wiring: it composes agent, device plugin and scheduler, like `agent.cli.run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from agent import logsetup
from agent.availability import ContainerGrant, DeviceGrant, PodGrant, PodResourcesSnapshot
from agent.cli import config as agent_config
from agent.cli.publish_service import TopologyService
from agent.cli.run import device_plugin_service, stop_services
from agent.cli.services import AgentContext
from agent.dispatch import CommandParser, version_line
from agent.inventory import discover
from agent.kube.publisher import NodeInfo
from agent.metrics import AgentMetrics
from agent.model import HEALTHY, UNHEALTHY
from agent.nrt import wire
from agent.nvml.fixture import ScriptedEvent, load_fixture
from agent.nvml.pynvml_backend import fake_backend
from deviceplugin.testing.kubelet import KubeletEmulator
from deviceplugin.testing.podresources_server import FakePodResourcesServer
from scheduler.cli import demo_cluster

NODE = "demo-dgx-a100"
FIXTURE = "dgx-a100-mig"
XID_GPU = 5
XID = 94  # contained ECC error: transient, recovers after a quiet period


class CaptureSink:
    """A TopologySink that keeps the objects the publisher writes (instead of an API server)."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []
        self.cond = threading.Condition()

    def node(self, name: str) -> NodeInfo | None:
        return NodeInfo(uid=None)

    def get_topology(self, name: str) -> dict[str, Any] | None:
        with self.cond:
            return self.objects[-1] if self.objects else None

    def apply_topology(self, obj: Mapping[str, Any]) -> None:
        with self.cond:
            self.objects.append(dict(obj))
            self.cond.notify_all()

    def patch_labels(self, name: str, patch: Mapping[str, str | None]) -> None:
        return None

    def wait(self, predicate: Any, timeout_s: float = 10.0) -> dict[str, Any]:
        """The newest object once `predicate(obj)` holds; raises TimeoutError otherwise."""
        with self.cond:
            ok = self.cond.wait_for(
                lambda: bool(self.objects) and predicate(self.objects[-1]), timeout_s
            )
            if not ok:
                raise TimeoutError("the NodeResourceTopology did not reach the expected state")
            return self.objects[-1]


def zone(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return next(z for z in obj["zones"] if z["name"] == name)


def zone_attr(obj: Mapping[str, Any], zone_name: str, attr: str) -> str:
    attrs = zone(obj, zone_name).get("attributes", [])
    return str(next((a["value"] for a in attrs if a["name"] == attr), ""))


def gpu_available(obj: Mapping[str, Any]) -> int:
    return sum(
        int(r["available"])
        for z in obj["zones"]
        if z["type"] == wire.ZONE_NODE
        for r in z.get("resources", [])
        if r["name"] == "nvidia.com/gpu"
    )


def _config(tmp: Path, quiet_s: float) -> agent_config.AgentConfig:
    return agent_config.load(
        [
            f"--node-name={NODE}",
            f"--nvml-fixture={FIXTURE}",
            "--allow-fake-gpus",
            f"--device-plugin-dir={tmp / 'dp'}",
            f"--pod-resources-socket={tmp / 'podres.sock'}",
            f"--kubelet-config={tmp / 'no-kubelet-config.yaml'}",
            "--topology-manager-policy=single-numa-node",
            "--topology-manager-scope=pod",
            "--metrics-address=127.0.0.1:0",
            "--node-labels=off",
            f"--health-quiet-period={quiet_s}",
        ],
        {},
    )


def _allocatable(kubelet: KubeletEmulator) -> PodResourcesSnapshot:
    grants = [
        DeviceGrant(resource_name=res, device_ids=(dev.id,), numa_nodes=dev.numa_nodes)
        for res, devices in sorted(kubelet.resources().items())
        for dev in devices.values()
    ]
    return PodResourcesSnapshot(devices=tuple(grants))


def node_demo(out: TextIO, quiet_s: float) -> None:
    fixture = load_fixture(FIXTURE)
    fixture = dataclasses.replace(
        fixture, events=(ScriptedEvent(after_s=4.0, gpu=XID_GPU, xid=XID),)
    )
    backend, _fake = fake_backend(fixture)
    with tempfile.TemporaryDirectory(prefix="gputopo-demo-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "dp").mkdir()
        cfg = _config(tmp, quiet_s)
        stop = threading.Event()
        ctx = AgentContext(
            config=cfg,
            backend=backend,
            inventory=discover(backend),
            stop=stop,
            metrics=AgentMetrics("demo"),
        )
        sink = CaptureSink()
        with (
            KubeletEmulator(tmp / "dp") as kubelet,
            FakePodResourcesServer(tmp / "podres.sock") as podres,
        ):
            try:
                _run_node(out, ctx, kubelet, podres, sink, quiet_s)
            finally:
                stop.set()
                stop_services(ctx.services)
                backend.close()


def _start(ctx: AgentContext, sink: CaptureSink) -> None:
    plugin = device_plugin_service(ctx)
    assert plugin is not None
    plugin.start()
    ctx.services.append(plugin)
    publisher = TopologyService(ctx, sink=sink)
    publisher.start()
    ctx.services.append(publisher)


def _run_node(
    out: TextIO,
    ctx: AgentContext,
    kubelet: KubeletEmulator,
    podres: FakePodResourcesServer,
    sink: CaptureSink,
    quiet_s: float,
) -> None:
    started = time.monotonic()
    out.write(f"== Node {NODE}: simulated DGX A100, GPUs 0-3 in MIG mode (fixture {FIXTURE}) ==\n")
    _start(ctx, sink)
    kubelet.wait_for(lambda k: len(k.resources()) >= 5 and all(k.resources().values()), 10.0)
    out.write("Resources the kubelet sees (device-plugin API v1beta1 over unix sockets):\n")
    for res, devices in sorted(kubelet.resources().items()):
        numa = sorted({n for d in devices.values() for n in d.numa_nodes})
        out.write(f"  {res:<26} {len(devices)} devices, NUMA {numa}\n")
    podres.set_allocatable(_allocatable(kubelet))
    ids, response = kubelet.admit("nvidia.com/gpu", 2)
    gpus = [ctx.inventory.gpu(i).index for i in ids]
    env = dict(response.envs)
    out.write(f"A pod asks for 2 GPUs: preferred allocation GPUs {gpus} (NVLink, same NUMA)\n")
    out.write(f"  Allocate -> NVIDIA_VISIBLE_DEVICES={env.get('NVIDIA_VISIBLE_DEVICES')}\n")
    podres.set_pod(_pod_grant("train-0", "nvidia.com/gpu", ids))
    obj = sink.wait(lambda o: gpu_available(o) == 2)
    full = Path(tempfile.gettempdir()) / "gputopo-demo-nrt.yaml"
    full.write_text(yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")
    out.write(f"NodeResourceTopology as published (condensed; full object in {full}):\n")
    out.write(_summary(obj))
    _xid_demo(out, ctx, kubelet, sink, quiet_s)
    out.write(f"(node demo took {time.monotonic() - started:.1f} s)\n")


def _pod_grant(name: str, resource: str, ids: tuple[str, ...]) -> PodGrant:
    container = ContainerGrant(
        name="main", devices=(DeviceGrant(resource_name=resource, device_ids=ids),)
    )
    return PodGrant(namespace="default", name=name, containers=(container,))


def _xid_demo(
    out: TextIO, ctx: AgentContext, kubelet: KubeletEmulator, sink: CaptureSink, quiet_s: float
) -> None:
    uuid = ctx.inventory.gpus[XID_GPU].uuid
    zone_name = wire.gpu_zone_name(XID_GPU)
    out.write(f"\n== Health: a scripted Xid {XID} (contained ECC error) on GPU {XID_GPU} ==\n")
    t0 = time.monotonic()
    kubelet.wait_for(lambda k: uuid not in k.healthy("nvidia.com/gpu"), 15.0)
    sink.wait(lambda o: zone_attr(o, zone_name, wire.GPU_ATTR_HEALTH) == UNHEALTHY)
    healthy = len(kubelet.healthy("nvidia.com/gpu"))
    out.write(
        f"  t={time.monotonic() - t0:4.1f}s  GPU {XID_GPU} Unhealthy: ListAndWatch resent, "
        f"NRT zone {zone_name} health=Unhealthy, {healthy} GPUs allocatable\n"
    )
    kubelet.wait_for(lambda k: uuid in k.healthy("nvidia.com/gpu"), quiet_s + 15.0)
    sink.wait(lambda o: zone_attr(o, zone_name, wire.GPU_ATTR_HEALTH) == HEALTHY)
    healthy = len(kubelet.healthy("nvidia.com/gpu"))
    out.write(
        f"  t={time.monotonic() - t0:4.1f}s  no new Xid for {quiet_s:g}s: "
        f"GPU {XID_GPU} Healthy again ({healthy} GPUs allocatable)\n"
    )


def _summary(obj: Mapping[str, Any]) -> str:
    """The object as `kubectl get -o yaml` would show it, condensed: attributes, then one line per
    zone with its non-zero resources as available/allocatable/capacity."""
    lines = [
        f"apiVersion: {obj['apiVersion']}  kind: {obj['kind']}  name: {obj['metadata']['name']}"
    ]
    lines += [f"  {a['name']}: {a['value']}" for a in obj.get("attributes", [])]
    for z in obj["zones"]:
        attrs = {a["name"]: a["value"] for a in z.get("attributes", [])}
        res = ", ".join(
            f"{r['name'].removeprefix('nvidia.com/')}={r['available']}/{r['allocatable']}/{r['capacity']}"
            for r in z.get("resources", [])
            if str(r["capacity"]) != "0" and r["name"] not in {"memory", "cpu"}
        )
        if z["type"] == wire.ZONE_NODE:
            cpus = attrs.get(wire.NODE_ATTR_CPUS, "?")
            lines.append(f"  zone {z['name']} (NUMA, cpus {cpus}): {res or '-'}")
        else:
            layout = attrs.get(wire.GPU_ATTR_MIG_LAYOUT) or "whole GPU"
            health = attrs.get(wire.GPU_ATTR_HEALTH)
            lines.append(
                f"    zone {z['name']} (GPU under {z.get('parent')}, {health}, {layout}): {res}"
            )
    return "".join(f"  {line}\n" for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
        prog="gputopo-scheduler demo",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--quiet-period",
        type=float,
        default=5.0,
        help="seconds without a new Xid before a GPU that had one is Healthy again",
    )
    parser.add_argument("--skip-node", action="store_true", help="only the scheduler part")
    parser.add_argument("--version", action="version", version=version_line(parser.prog))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logsetup.configure("text", level=40)
    out = sys.stdout
    if not args.skip_node:
        node_demo(out, args.quiet_period)
    demo_cluster.run(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
