"""The agent on the NVIDIA driver: what only a GPU machine shows (run there by hand; see
tests/README.md, "The GPU tier").

On a machine with the driver, each test runs the agent against NVML and checks it against
`nvidia-smi`, and the MPS test runs a CUDA client (PyTorch) under the limits a DRA share's CDI
spec gives it. Elsewhere (CI) the same tests run against the `vm-h200` fixture, recorded on a
real H200, checked against that record; the checks that need the driver are skipped.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.dra import DRIVER, GROUP, SLICES, VERSION
from agent.inventory import discover
from agent.load_sampler import LoadSampler
from agent.nvml.fixture import load_fixture, to_document
from agent.nvml.pynvml_backend import open_backend
from deviceplugin.testing.dra_kubelet import DraKubelet
from deviceplugin.testing.kubelet import KubeletEmulator
from tests.builders.dra import allocation_status, make_claim
from tests.builders.fakeapi import make_pod
from tests.builders.nvml import HAS_DRIVER
from tests.builders.process import ROOT, CommandProcess, module_argv
from tests.builders.wait import wait_for
from tests.fakeapi import FakeApiServer

NODE = "gpu-node"
FIXTURE = "vm-h200"
NVML_FLAGS = [] if HAS_DRIVER else ["--nvml-fixture", FIXTURE, "--allow-fake-gpus"]
ONE_SHOT_FLAGS = [] if HAS_DRIVER else ["--nvml-fixture", FIXTURE]
needs_driver = pytest.mark.skipif(not HAS_DRIVER, reason="needs the NVIDIA driver (a GPU machine)")
MPS_CONTROL = shutil.which("nvidia-cuda-mps-control")


@dataclass(frozen=True)
class SeenGpu:
    index: int
    uuid: str
    name: str
    memory_mib: int
    reserved_mib: int  # what the driver keeps of it (nvidia-smi's memory.reserved)
    pci_bus_id: str
    compute_capability: str


def _smi_gpus() -> list[SeenGpu]:
    fields = "index,uuid,name,memory.total,memory.reserved,pci.bus_id,compute_cap"
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [
        SeenGpu(int(i), u, n, int(m), int(r), b, c)
        for i, u, n, m, r, b, c in (
            [cell.strip() for cell in row] for row in csv.reader(out.splitlines()) if row
        )
    ]


def expected_gpus() -> list[SeenGpu]:
    """The node's GPUs as something other than our agent says: nvidia-smi on the driver, else
    the fixture's record."""
    if HAS_DRIVER:
        return _smi_gpus()
    return [_from_document(g) for g in to_document(load_fixture(FIXTURE).inventory)["gpus"]]


def _from_document(gpu: dict[str, Any]) -> SeenGpu:
    """A GPU of the fixture format (`inventory -o json`, `record`)."""
    return SeenGpu(
        gpu["index"],
        gpu["uuid"],
        gpu["name"],
        gpu["memoryMiB"],
        gpu.get("memoryReservedMiB", 0),
        _bus_id(gpu["pciBusId"]),
        gpu["computeCapability"],
    )


def _bus_id(text: str) -> str:
    """nvidia-smi writes `00000000:00:06.0`, NVML `00000000:00:06.0` too; compare lower-case."""
    return text.lower()


def _agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        module_argv("agent.cli", *args), cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir="/tmp", ignore_cleanup_errors=True) as root:
        yield Path(root)


def _inventory_json(*flags: str) -> dict[str, Any]:
    done = _agent("inventory", "-o", "json", *flags)
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def test_the_inventory_names_the_gpus_as_nvidia_smi_does():
    seen = _inventory_json(*ONE_SHOT_FLAGS)
    ours = [_from_document(g) for g in seen["gpus"]]
    want = [replace(g, pci_bus_id=_bus_id(g.pci_bus_id)) for g in expected_gpus()]
    print("inventory:", json.dumps(seen["gpus"]), "driver", seen["driverVersion"])
    assert ours == want
    assert len(seen["topology"]) == len(want)


def test_a_recorded_node_replays_as_the_same_inventory(folder):
    record = folder / "node.json"
    done = _agent("record", "-o", str(record), *ONE_SHOT_FLAGS)
    assert done.returncode == 0, done.stderr
    assert _inventory_json("--nvml-fixture", str(record)) == _inventory_json(*ONE_SHOT_FLAGS)


def _run_agent(folder: Path, *extra: str) -> CommandProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_")}
    argv = module_argv(
        "agent.cli", "run", "--node-name", NODE, *NVML_FLAGS,
        "--no-publish", "--node-labels", "off", "--metrics-address", "127.0.0.1:0",
        "--host-root", str(folder / "host") if not HAS_DRIVER else "/", *extra,
    )  # fmt: skip
    return CommandProcess(argv, env)


def test_the_device_plugin_offers_every_gpu_by_uuid_healthy_and_allocates_it(folder):
    (folder / "host").mkdir()
    uuids = [g.uuid for g in expected_gpus()]
    with KubeletEmulator() as kubelet:
        agent = _run_agent(folder, "--device-plugin-dir", str(kubelet.plugin_dir))
        try:
            gpu = "nvidia.com/gpu"
            assert kubelet.wait_for(lambda k: len(k.devices(gpu)) == len(uuids), 60.0), agent.lines
            assert sorted(kubelet.devices(gpu)) == sorted(uuids)
            time.sleep(5)  # the Xid watch has been waiting on the driver's events meanwhile
            assert kubelet.healthy(gpu) == set(uuids), agent.lines
            response = kubelet.allocate(gpu, uuids[:1])
            (container,) = response.container_responses
            assert dict(container.envs)["NVIDIA_VISIBLE_DEVICES"] == uuids[0]
            assert not agent.logged("ERROR"), agent.lines
            assert agent.stop() == 0, agent.lines
        finally:
            agent.stop()
            shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)


class DraNode:
    """The agent with every GPU on DRA, the fake API server and the kubelet's DRA side."""

    def __init__(self, fake: FakeApiServer, folder: Path, *extra: str) -> None:
        for name in ("registry", "plugins", "host", "dp"):
            (folder / name).mkdir(exist_ok=True)
        fake.add_node(NODE)
        self.cdi_dir = Path("/var/run/cdi") if HAS_DRIVER else folder / "host/var/run/cdi"
        self.api = fake.api_client()
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.agent = _run_agent(
            folder, "--dra-gpus", "all", "--kubeconfig",
            str(fake.write_kubeconfig(folder / "kubeconfig")),
            "--device-plugin-dir", str(folder / "dp"),
            "--dra-registry-dir", str(folder / "registry"),
            "--dra-plugins-dir", str(folder / "plugins"), *extra,
        )  # fmt: skip
        self.kubelet = DraKubelet(folder / "registry")

    def devices(self) -> list[dict[str, Any]]:
        assert wait_for(self.kubelet.scan, 60.0, "the DRA plugin's registration") == [DRIVER]
        slices = wait_for(
            lambda: self.custom.list_cluster_custom_object(GROUP, VERSION, SLICES)["items"],
            30.0,
            "a ResourceSlice",
        )
        found: list[dict[str, Any]] = slices[0]["spec"]["devices"]
        return found

    def claim(self, name: str, device: str, result: dict[str, Any] | None = None) -> str:
        """A claim allocated `device` for a new pod of the same name; prepared; its CDI edits."""
        pod = self.core.create_namespaced_pod("default", make_pod(name, node=NODE))
        made = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", make_claim(name)
        )
        status = allocation_status(NODE, [("gpu", device)], [(name, pod.metadata.uid)])
        for entry in status["status"]["allocation"]["devices"]["results"]:
            entry.update(result or {})
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "resourceclaims", name, status
        )
        uid: str = made["metadata"]["uid"]
        out = self.kubelet.prepare(DRIVER, [("default", name, uid)])
        assert not isinstance(out[uid], str), out[uid]
        return uid

    def edits(self, claim_uid: str) -> dict[str, Any]:
        spec = json.loads((self.cdi_dir / f"k8s.gputopo.io-claim_{claim_uid}.json").read_text())
        print("CDI spec:", json.dumps(spec))
        edits: dict[str, Any] = spec["devices"][0]["containerEdits"]
        return edits

    def close(self) -> int:
        self.kubelet.close()
        self.api.close()
        return self.agent.stop()


def test_the_dra_driver_publishes_each_gpu_as_nvidia_smi_sees_it_and_prepares_a_claim(
    fake_api, folder
):
    node = DraNode(fake_api, folder)
    try:
        devices = node.devices()
        print("ResourceSlice devices:", json.dumps(devices))
        want = expected_gpus()
        assert [d["attributes"]["uuid"]["string"] for d in devices] == [g.uuid for g in want]
        for device, gpu in zip(devices, want, strict=True):
            attributes = device["attributes"]
            assert attributes["productName"]["string"] == gpu.name
            assert attributes["cudaComputeCapability"]["version"] == f"{gpu.compute_capability}.0"
            assert (
                attributes["resource.kubernetes.io/pciBusID"]["string"]
                == (
                    gpu.pci_bus_id.lower()[4:]  # the standard attribute: domain of 4 digits
                )
            )
            usable = gpu.memory_mib - gpu.reserved_mib  # DESIGN §14: total less reserved
            assert device["capacity"]["memory"]["value"] == f"{usable}Mi"
        uid = node.claim("whole", devices[0]["name"])
        assert node.edits(uid)["env"] == [f"NVIDIA_VISIBLE_DEVICES={want[0].uuid}"]
        assert not node.agent.logged("ERROR"), node.agent.lines
    finally:
        code = node.close()
    assert code == 0, node.agent.lines


CLIENT = textwrap.dedent(
    """
    import json, sys, torch
    free, total = torch.cuda.mem_get_info()
    result = {
        "device": torch.cuda.get_device_name(0), "total_gib": total / 2**30,
        "free_gib": free / 2**30,
    }
    for gib in (2, 6):
        try:
            block = torch.empty(gib * 2**30, dtype=torch.uint8, device="cuda")
            block.fill_(1)
            torch.cuda.synchronize()
            result[f"{gib}GiB"] = "allocated"
            del block
            torch.cuda.empty_cache()
        except RuntimeError as exc:
            result[f"{gib}GiB"] = "refused: " + str(exc).splitlines()[0][:120]
    print(json.dumps(result), flush=True)
    sys.stdin.read()  # an MPS client, its context open, until the test closes stdin
    """
)


def _cuda_env() -> dict[str, str]:
    """The environment of a CUDA client: the machine's own Python (PyTorch), not the wheels
    this tier carries."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _start_as_container(edits: dict[str, Any]) -> subprocess.Popen[str]:
    """`CLIENT` with the CDI edits applied as a runtime would: their environment, and their
    mounts (bind mounts in a mount namespace of its own)."""
    binds = " && ".join(
        f"mount --bind {m['hostPath']} {m['containerPath']}" for m in edits.get("mounts", [])
    )
    env = _cuda_env()
    env.update(line.split("=", 1) for line in edits["env"])
    script = f"{binds or 'true'} && exec python3 -c '{CLIENT}'"
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def _mps_clients(port: int) -> float | None:
    """`gputopo_mps_gpu_clients` of GPU 0 on the MPS supervisor's metrics, None before one."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith('gputopo_mps_gpu_clients{gpu="0"'):
            return float(line.rsplit(" ", 1)[1]) or None
    return None


@needs_driver
@pytest.mark.skipif(MPS_CONTROL is None, reason="no nvidia-cuda-mps-control on this machine")
@pytest.mark.timeout(300)
def test_a_dra_share_under_mps_is_held_to_the_memory_its_allocation_gave(fake_api, folder):
    mps_root = folder / "mps"
    config = folder / "agent.yaml"
    config.write_text("version: v1\nsharing:\n  mps:\n    resources:\n"
                      "    - name: nvidia.com/gpu\n      replicas: 4\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_")}
    mps = CommandProcess(
        module_argv(
            "agent.cli", "mps", f"--mps-root={mps_root}", "--users=0",
            "--exclusive-process=off", "--metrics-address=127.0.0.1:0",
        ),
        env,
    )  # fmt: skip
    node: DraNode | None = None
    try:
        port = mps.port(60)
        node = DraNode(fake_api, folder, "--config", str(config), "--mps-root", str(mps_root))
        devices = node.devices()
        print("shared devices:", json.dumps(devices))
        result = {"shareID": "a1b2c", "consumedCapacity": {"memory": "4Gi", "compute": "25"}}
        uid = node.claim("share", devices[0]["name"], result)
        edits = node.edits(uid)
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M" in edits["env"]
        client = _start_as_container(edits)
        assert client.stdin is not None
        assert client.stdout is not None
        try:
            seen = json.loads(client.stdout.readline())
            clients, deadline = None, time.monotonic() + 15  # None: NVML lists none (yet)
            while clients is None and time.monotonic() < deadline:
                time.sleep(0.25)
                clients = _mps_clients(port)
        finally:
            client.stdin.close()
            client.wait(timeout=60)
            client.stdout.close()
        print("client under the share's limits:", seen, "MPS clients seen:", clients)
        assert client.returncode == 0
        assert seen["2GiB"] == "allocated"
        assert seen["6GiB"].startswith("refused")
        assert seen["free_gib"] < 4  # what is left under the limit; the total is the GPU's
        assert seen["total_gib"] > 100
        assert clients == 1
        assert node.close() == 0, node.agent.lines
        node = None
    finally:
        if node is not None:
            node.close()
        code = mps.stop()
        print("mps log:", "\n".join(mps.lines[-20:]))
    assert code == 0


BUSY = textwrap.dedent(
    """
    import sys, time, torch
    held = torch.ones(20 * 2**30, dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    print("busy", flush=True)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
    """
)


@needs_driver
@pytest.mark.timeout(180)
def test_the_load_sampler_reads_a_busy_gpu_then_lets_it_go_idle():
    """What load-aware placement reads (the NRT's memoryUsedMiB, smPercent, powerW): a client
    holding 20 GiB and multiplying bf16 matrices, then nothing."""
    backend = open_backend(None)
    client: subprocess.Popen[str] | None = None
    try:
        sampler = LoadSampler(backend, lambda: discover(backend), window_s=6.0)
        idle_before = sampler()[0]
        client = subprocess.Popen(
            ["python3", "-c", BUSY, "15"], env=_cuda_env(), stdout=subprocess.PIPE, text=True
        )
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "busy"
        readings = []
        while client.poll() is None:
            time.sleep(0.5)
            readings.append(sampler()[0])
        assert client.returncode == 0
        idle_after = wait_for(
            lambda: (load := sampler().get(0)) and load.memory_used_mib < 1024 and load,
            30.0,
            "the window to forget the client",
        )
    finally:
        if client is not None:
            if client.poll() is None:
                client.kill()
            client.wait(timeout=30)
            assert client.stdout is not None
            client.stdout.close()
        backend.close()
    busiest = max(readings, key=lambda load: load.sm_percent)
    print("idle before:", idle_before, "busiest:", busiest, "idle after:", idle_after)
    assert idle_before.memory_used_mib < 1024
    assert max(r.memory_used_mib for r in readings) >= 20 * 1024
    assert busiest.sm_percent >= 50
    assert busiest.power_w > idle_before.power_w
