"""`gputopo-agent run --dra-gpus`: some GPUs through the device plugin, the others through DRA."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kubernetes import client

from agent.dra import DRIVER, GROUP, SLICES, VERSION
from agent.nvml.fixture import load_fixture
from deviceplugin.testing.dra_kubelet import DraKubelet
from deviceplugin.testing.kubelet import KubeletEmulator
from tests.builders.dra import allocation_status, make_claim
from tests.builders.fakeapi import make_pod

NODE = "node-a"


@pytest.fixture
def dirs():
    with tempfile.TemporaryDirectory(dir="/tmp") as root:
        base = Path(root)
        for name in ("registry", "plugins", "host"):
            (base / name).mkdir()
        yield base


@pytest.fixture
def kubelet():
    with KubeletEmulator() as emulator:
        yield emulator
    shutil.rmtree(emulator.plugin_dir, ignore_errors=True)


def _wait(predicate, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    return None


def _start_agent(kubelet, dirs: Path, gpus: str, kubeconfig: Path) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "agent.cli", "run", "--node-name", NODE,
        "--nvml-fixture", "dgx-a100", "--allow-fake-gpus", "--dra-gpus", gpus,
        "--device-plugin-dir", str(kubelet.plugin_dir), "--kubeconfig", str(kubeconfig),
        "--dra-registry-dir", str(dirs / "registry"), "--dra-plugins-dir", str(dirs / "plugins"),
        "--host-root", str(dirs / "host"),
        "--no-publish", "--node-labels", "off", "--metrics-address", "127.0.0.1:0",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_gpus_through_dra_and_six_through_the_device_plugin(fake_api, kubelet, dirs):
    fake_api.add_node(NODE)
    kubeconfig = fake_api.write_kubeconfig(dirs / "kubeconfig")
    proc = _start_agent(kubelet, dirs, "6,7", kubeconfig)
    dra = DraKubelet(dirs / "registry")
    api = fake_api.api_client()
    custom = client.CustomObjectsApi(api)
    try:
        assert kubelet.wait_for(lambda k: len(k.devices("nvidia.com/gpu")) == 6, 20.0)
        assert _wait(dra.scan) == [DRIVER]
        slices = _wait(lambda: custom.list_cluster_custom_object(GROUP, VERSION, SLICES)["items"])
        minors = [g.minor for g in load_fixture("dgx-a100").inventory.gpus]
        names = [d["name"] for d in slices[0]["spec"]["devices"]]
        assert names == [f"gpu-{minors[6]}", f"gpu-{minors[7]}"]
        uuids = set(kubelet.devices("nvidia.com/gpu"))
        dra_uuids = {d["attributes"]["uuid"]["string"] for d in slices[0]["spec"]["devices"]}
        assert not uuids & dra_uuids
        pod = client.CoreV1Api(api).create_namespaced_pod("default", make_pod("p", node=NODE))
        claim = custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "resourceclaims", make_claim("c")
        )
        status = allocation_status(NODE, [("gpu", names[0])], [("p", pod.metadata.uid)])
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "resourceclaims", "c", status
        )
        uid = claim["metadata"]["uid"]
        out = dra.prepare(DRIVER, [("default", "c", uid)])
        assert [d.device for d in out[uid]] == [names[0]]
        spec = json.loads(
            (dirs / "host/var/run/cdi" / f"k8s.gputopo.io-claim_{uid}.json").read_text()
        )
        assert spec["devices"][0]["name"] == f"{uid}-{names[0]}"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        dra.close()
        api.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert list((dirs / "registry").iterdir()) == []


def test_an_unknown_dra_gpu_refuses_the_start(kubelet, dirs):
    command = [
        sys.executable, "-m", "agent.cli", "run", "--node-name", NODE,
        "--nvml-fixture", "dgx-a100", "--allow-fake-gpus", "--dra-gpus", "3,9",
        "--device-plugin-dir", str(kubelet.plugin_dir), "--no-publish", "--node-labels", "off",
        "--dra-registry-dir", str(dirs / "registry"), "--metrics-address", "127.0.0.1:0",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "--dra-gpus: no GPU 9 on this node" in done.stderr.strip().splitlines()[-1]


def test_without_credentials_the_dra_plugin_serves_and_the_claim_error_says_why(kubelet, dirs):
    proc = _start_agent(kubelet, dirs, "all", dirs / "missing")
    dra = DraKubelet(dirs / "registry")
    try:
        assert _wait(dra.scan) == [DRIVER]
        out = dra.prepare(DRIVER, [("default", "c", "uid-1")])
        assert "no API server credentials" in out["uid-1"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        dra.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "publishing ResourceSlices failed" in err
