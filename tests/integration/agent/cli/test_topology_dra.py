"""`gputopo-agent run --dra-gpus` and the NRT: the topology service built from the config counts
the DRA driver's GPUs in their zones, used while the kubelet's PodResources lists a claim of them
(the fake kubelet on a real socket, the fake API server)."""

from __future__ import annotations

import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from agent.availability import ClaimDevice, ClaimGrant, ContainerGrant, PodGrant
from agent.cli import config as agent_config
from agent.cli.publish_service import TopologyService
from agent.cli.run import open_node
from agent.cli.services import AgentContext
from agent.dra import DRIVER
from agent.nrt import PLURAL, decode
from agent.resource_names import DRA_GPU_RESOURCE, GPU_RESOURCE
from deviceplugin.testing.podresources_server import FakePodResourcesServer
from tests.builders.agentnode import NODE, serve_socket
from tests.builders.clock import FakeClock
from tests.builders.topology import allocatable_of


def test_the_dra_gpus_of_the_config_are_counted_and_a_claim_uses_one(fake_api_with_crd):
    clock = FakeClock()
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    argv = [
        "--node-name", NODE, "--nvml-fixture", "dgx-h100", "--no-device-plugin",
        "--kubeconfig", str(fake_api_with_crd.write_kubeconfig(folder / "kc")),
        "--device-plugin-dir", str(folder), "--pod-resources-socket", str(folder / "podres.sock"),
        "--kubelet-config", "/nonexistent/config.yaml", "--dra-gpus", "7",
    ]  # fmt: skip
    cfg = agent_config.load(argv, {})
    backend, inventory = open_node(cfg)
    ctx = AgentContext(config=cfg, backend=backend, inventory=inventory, stop=threading.Event())
    allocatable = allocatable_of(inventory)
    seven = str(inventory.gpus[7].uuid)
    devices = tuple(d for d in allocatable.devices if seven not in d.device_ids)
    device = f"gpu-{inventory.gpus[7].minor}"
    claim = ClaimGrant(
        claim_namespace="ml",
        claim_name="c",
        devices=(ClaimDevice(driver=DRIVER, pool=NODE, device=device),),
    )
    pod = PodGrant(
        namespace="ml", name="p", containers=(ContainerGrant(name="m", claims=(claim,)),)
    )
    with FakePodResourcesServer(cfg.pod_resources_socket, clock=clock) as server:
        server.set_allocatable(replace(allocatable, devices=devices))
        serve_socket(folder / "kubelet.sock")
        topology = TopologyService(ctx, clock=clock)
        try:

            def zone(index: int) -> dict[str, int]:
                topology.publisher.publish_once()
                nrt = decode(fake_api_with_crd.get_object(PLURAL, NODE))
                return {n: r.available for n, r in nrt.gpu_counts(index).items()}

            assert zone(7) == {DRA_GPU_RESOURCE: 1}
            server.set_pod(pod)
            assert zone(7) == {DRA_GPU_RESOURCE: 0}
            assert zone(6) == {GPU_RESOURCE: 1}
        finally:
            topology.stop()
            backend.close()
