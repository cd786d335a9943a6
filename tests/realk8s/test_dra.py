"""The agent as DRA driver gpu.gputopo.io beside a real kubelet 1.37 and kube-scheduler: slices
published, claims allocated by kube-scheduler from the shipped DeviceClasses and the agent's
attributes, prepared by the agent (a CDI spec per claim) and seen in the container's environment
through containerd's CDI; an Xid in the slices and the pod's status; agent and kubelet restarts.

The DRA agent runs on its own (module fixture) with fixture dgx-a100-mig, every GPU given to DRA
(its device plugin then advertises nothing), GPU 7 shared under sharing.mps (an MPS root whose
status file says MPS serves root), no NRT and no labels (the session agent's)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.dra import DRIVER
from agent.mps.layout import MpsLayout
from agent.mps.status import DaemonStatus, MpsStatus, write_status
from agent.nvml.fixture import load_fixture
from agent.shares import mps_pipe_directory, mps_shm_directory
from deviceplugin.mps_env import MEMORY_ENV, PIPE_ENV, THREADS_ENV
from tests.builders.dra import claim_template, with_claim_template
from tests.builders.process import ROOT, CommandProcess
from tests.builders.realk8s import Cluster, busybox_pod, env_of, wait_until
from tests.builders.sharenode import mps_serving

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(600)]

FIXTURE = "dgx-a100-mig"
DRA_YAML = ROOT / "daemonset" / "optional" / "dra" / "dra.yaml"
SLICE_POLICY = DRA_YAML.parent / "slice-policy.yaml"
A100 = "NVIDIA A100-SXM4-80GB"
ATTR = f"device.attributes['{DRIVER}']"
CAP = f"device.capacity['{DRIVER}']"


SHARED_GPU = 7
REPLICAS = 4
AGENT_CONFIG = f"""version: v1
sharing:
  mps:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: {REPLICAS}
      devices: [{SHARED_GPU}]
"""


def mps_root(cluster: Cluster) -> Path:
    """An MPS root as `gputopo-agent mps` keeps it for root (uid 0, as the busybox pods run):
    its status file says MPS serves (dated an hour ahead: no supervisor rewrites it), and its pipe
    directory and shm, which a share's CDI spec mounts, exist."""
    root = mps_serving(cluster.run_dir / "mps", users=(0,))
    for folder in (mps_pipe_directory(str(root), 0), mps_shm_directory(str(root), 0)):
        Path(folder).mkdir(parents=True, exist_ok=True)
    return root


def start_dra_agent(cluster: Cluster) -> CommandProcess:
    kubelet = cluster.kubelet
    config_file = cluster.run_dir / "agent" / "dra-agent.yaml"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(AGENT_CONFIG)
    proc = cluster.start_agent(
        "--nvml-fixture", FIXTURE, "--dra-gpus", "all", "--no-publish", "--node-labels", "off",
        "--dra-registry-dir", kubelet["plugins_registry"],
        "--dra-plugins-dir", kubelet["plugins_dir"],
        "--share-record", str(cluster.run_dir / "agent" / "dra-shares.json"),
        "--health-recheck-interval", "45", "--mps-root", str(mps_root(cluster)),
        config_file=config_file,
    )  # fmt: skip
    proc.port(timeout_s=60)
    return proc


def slices(cluster: Cluster) -> list[dict[str, Any]]:
    listed = json.loads(
        cluster.kubectl(
            "get", "resourceslices", "-o", "json",
            f"--field-selector=spec.nodeName={cluster.node},spec.driver={DRIVER}",
        )
    )  # fmt: skip
    return list(listed["items"])


def devices(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices(cluster) for d in s["spec"].get("devices", [])}


class DraAgent:
    """The DRA agent process of the module; a test may restart it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.proc = start_dra_agent(cluster)

    def stop(self) -> None:
        self.proc.stop()

    def start(self) -> None:
        self.proc = start_dra_agent(self.cluster)


@pytest.fixture(scope="module")
def dra_agent(cluster: Cluster) -> Iterator[DraAgent]:
    cluster.kubectl("apply", "-f", str(DRA_YAML))
    cluster.kubectl("apply", "-f", str(SLICE_POLICY))  # the agent writes its slices under it
    agent = DraAgent(cluster)
    wait_until(lambda: len(devices(cluster)) >= 8, 90, "the agent's ResourceSlices")
    yield agent
    agent.stop()


def slice_uids(cluster: Cluster) -> set[str]:
    return {s["metadata"]["uid"] for s in slices(cluster)}


def device_health(cluster: Cluster, pod: str) -> dict[str, str]:
    """`allocatedResourcesStatus` of the pod's container: resource ID -> health."""
    statuses = cluster.pod(pod)["status"].get("containerStatuses") or [{}]
    return {
        r["resourceID"]: r.get("health", "")
        for s in statuses[0].get("allocatedResourcesStatus") or []
        for r in s.get("resources") or []
    }


def run_pod(cluster: Cluster, name: str, template: dict[str, Any]) -> dict[str, Any]:
    """Create the template and a pod using it; wait until Running; the pod and its claim."""
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(template))
    pod = with_claim_template(busybox_pod(name), template["metadata"]["name"])
    cluster.kubectl("create", "-f", "-", stdin=json.dumps(pod))
    cluster.wait_running(name, timeout_s=120)
    status = cluster.pod(name)["status"]
    claim_name = status["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = json.loads(cluster.kubectl("get", "resourceclaim", claim_name, "-o", "json"))
    return claim


def allocated(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def visible(cluster: Cluster, name: str) -> list[str]:
    env = wait_until(
        lambda: env_of(cluster.logs(name)).get("NVIDIA_VISIBLE_DEVICES"), 30, f"{name}'s env"
    )
    return sorted(str(env).split(","))


def test_slices_publish_every_gpu_and_mig_device_with_attributes(cluster: Cluster, dra_agent):
    inventory = load_fixture(FIXTURE).inventory
    found = devices(cluster)
    (pool,) = {s["spec"]["pool"]["name"] for s in slices(cluster)}
    assert pool == cluster.node
    whole = [f"gpu-{g.minor}" for g in inventory.gpus if not g.mig_devices]
    assert set(whole) <= set(found)
    assert len(found) == len(whole) + sum(len(g.mig_devices) for g in inventory.gpus)
    gpu = found[whole[0]]
    assert gpu["attributes"]["productName"] == {"string": A100}
    assert gpu["attributes"]["type"] == {"string": "gpu"}
    assert "resource.kubernetes.io/pciBusID" in gpu["attributes"]
    mig = next(d for d in found.values() if d["attributes"]["type"] == {"string": "mig"})
    sms = {"1g.10gb": "14", "2g.20gb": "28", "3g.40gb": "42", "4g.40gb": "56"}
    assert mig["capacity"]["multiprocessors"] == {
        "value": sms[mig["attributes"]["profile"]["string"]]
    }


def test_a_claim_by_product_and_memory_runs_and_sees_its_gpu_uuid(cluster: Cluster, dra_agent):
    template = claim_template(
        "a100-40g", "gpu.gputopo.io",
        f"{ATTR}.productName == '{A100}'",
        f"{CAP}.memory.compareTo(quantity('40Gi')) >= 0",
    )  # fmt: skip
    try:
        claim = run_pod(cluster, "dra-one", template)
        (device,) = allocated(claim)
        want = devices(cluster)[device]["attributes"]["uuid"]["string"]
        assert visible(cluster, "dra-one") == [want]
        spec = Path("/var/run/cdi") / f"k8s.gputopo.io-claim_{claim['metadata']['uid']}.json"
        assert spec.exists()
    finally:
        cluster.delete_pods("dra-one")


def test_two_gpus_matching_the_nvlink_island(cluster: Cluster, dra_agent):
    template = claim_template(
        "two-island", "gpu.gputopo.io", count=2, match_attribute=f"{DRIVER}/nvlinkIsland"
    )
    try:
        claim = run_pod(cluster, "dra-two", template)
        pair = allocated(claim)
        found = devices(cluster)
        assert len(pair) == 2
        islands = {found[d]["attributes"]["nvlinkIsland"]["int"] for d in pair}
        assert len(islands) == 1
        uuids = sorted(found[d]["attributes"]["uuid"]["string"] for d in pair)
        assert visible(cluster, "dra-two") == uuids
    finally:
        cluster.delete_pods("dra-two")


def test_a_mig_claim_gets_a_mig_device(cluster: Cluster, dra_agent):
    template = claim_template("mig-2g", "mig.gputopo.io", f"{ATTR}.profile == '2g.20gb'")
    try:
        claim = run_pod(cluster, "dra-mig", template)
        (device,) = allocated(claim)
        attributes = devices(cluster)[device]["attributes"]
        assert attributes["profile"] == {"string": "2g.20gb"}
        assert visible(cluster, "dra-mig") == [attributes["uuid"]["string"]]
    finally:
        cluster.delete_pods("dra-mig")


def test_two_20gi_shares_of_one_gpu_run_with_their_mps_limits(cluster: Cluster, dra_agent):
    shared = f"gpu-{load_fixture(FIXTURE).inventory.gpus[SHARED_GPU].minor}"
    assert devices(cluster)[shared]["allowMultipleAllocations"] is True
    assert "taints" not in devices(cluster)[shared]  # MPS serves: the share is healthy
    template = claim_template("share-20g", "gpu-share.gputopo.io", capacity={"memory": "20Gi"})
    try:
        first = run_pod(cluster, "dra-share-a", template)
        second = run_pod(cluster, "dra-share-b", template)
        results = [c["status"]["allocation"]["devices"]["results"][0] for c in (first, second)]
        assert [r["device"] for r in results] == [shared, shared]
        assert results[0]["shareID"] != results[1]["shareID"]
        assert [r["consumedCapacity"]["memory"] for r in results] == ["20Gi", "20Gi"]
        uuid = devices(cluster)[shared]["attributes"]["uuid"]["string"]
        assert visible(cluster, "dra-share-a") == visible(cluster, "dra-share-b") == [uuid]
        # the limits of DESIGN §12 through the claim's CDI spec: its memory, the equal split of
        # the SMs (the claim asked no compute), root's MPS pipe directory
        env = env_of(cluster.logs("dra-share-a"))
        pipe = mps_pipe_directory(str(cluster.run_dir / "mps"), 0)
        assert (env.get(MEMORY_ENV), env.get(THREADS_ENV), env.get(PIPE_ENV)) == (
            "0=20480M", str(100 // REPLICAS), pipe,
        )  # fmt: skip
    finally:
        cluster.delete_pods("dra-share-a", "dra-share-b")


def test_while_mps_does_not_serve_the_shared_gpu_is_tainted_and_then_healthy_again(
    cluster: Cluster, dra_agent
):
    shared = f"gpu-{load_fixture(FIXTURE).inventory.gpus[SHARED_GPU].minor}"
    status = MpsLayout(cluster.run_dir / "mps").status_file
    down = MpsStatus(written_at=time.time() + 3600, gpus=(),
                     daemons=(DaemonStatus(uid=0, up=False, reason="exited"),))  # fmt: skip
    try:
        write_status(status, down)
        wait_until(lambda: tainted(cluster, shared), 30, f"{shared} tainted while MPS is down")
        assert not tainted(cluster, "gpu-4")  # a whole GPU needs no MPS
    finally:
        mps_root(cluster)  # serving again
    wait_until(lambda: not tainted(cluster, shared), 30, f"{shared} healthy once MPS serves")


def test_an_xid_taints_the_device_and_shows_in_the_pod_status(cluster: Cluster, dra_agent):
    """dgx-a100-mig's fake NVML emits Xid 79 on GPU5 30 s after the agent starts; the GPU
    answers NVML again, so it is Healthy at the next reset-required probe (the DRA agent probes
    every 45 s, so the Unhealthy state lasts long enough to be seen)."""
    gpu5 = load_fixture(FIXTURE).inventory.gpus[5]
    template = claim_template(
        "gpu5", "gpu.gputopo.io", f"{ATTR}.uuid == '{gpu5.uuid}'",
        tolerate=f"{DRIVER}/unhealthy",
    )  # fmt: skip
    name = f"gpu-{gpu5.minor}"
    resource = ""  # the kubelet 1.37 names the resource by its CDI device ID
    seen: set[str] = set()
    last: list[dict[str, str]] = [{}]
    probe = TaintedClaimProbe(cluster, gpu5.uuid, name)

    def observe() -> bool:
        last[0] = device_health(cluster, "dra-xid")
        if last[0].get(resource) == "Unhealthy":
            seen.add("pod")
        if tainted(cluster, name):
            seen.add("slice")
        if "slice" in seen:
            probe.sample()  # a new claim for it, tried while the taint is there
        # done once the pod said Unhealthy and the probe looked under the taint: the pod's
        # status can come before the slice's taint, which the publisher writes on its next poll
        return "pod" in seen and probe.samples >= 1

    try:
        claim = run_pod(cluster, "dra-xid", template)
        resource = f"k8s.gputopo.io/claim={claim['metadata']['uid']}-{name}"
        # Healthy once the module agent's own first Xid (30 s after its start) has passed: up
        # to 45 s for the probe and the kubelet's next pod status
        wait_until(
            lambda: device_health(cluster, "dra-xid").get(resource) == "Healthy", 120,
            f"{resource} Healthy in the pod's status",
        )  # fmt: skip
        # and the slice without that Xid's taint: a taint the stopped agent left would be seen
        # (and gone) before the restarted agent's own
        wait_until(lambda: not tainted(cluster, name), 30, f"{name} untainted in the slice")
        dra_agent.stop()  # the restarted fake NVML emits the Xid 30 s after the start
        dra_agent.start()
        try:
            wait_until(observe, 90, f"{resource} Unhealthy in the pod's status and tainted")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; seen {seen}; pod's last status {last[0]}") from None
        probe.finish()
        wait_until(
            lambda: device_health(cluster, "dra-xid").get(resource) == "Healthy", 120,
            f"{resource} Healthy again",
        )  # fmt: skip
        assert cluster.pod("dra-xid")["status"]["phase"] == "Running"
    finally:
        cluster.delete_pods("dra-xid", "dra-avoid")


def tainted(cluster: Cluster, device: str) -> bool:
    taints = devices(cluster).get(device, {}).get("taints", [])
    return any(t["key"] == f"{DRIVER}/unhealthy" for t in taints)


class TaintedClaimProbe:
    """A claim for one GPU, not tolerating its taint, made as soon as the taint shows in the
    slice: kube-scheduler must allocate it nothing while the slice carries the taint. The claim
    is read before the slice and a taint only goes away here, so an allocation seen with the
    taint still there was made under it. That kube-scheduler tried is read from the pod's
    `PodScheduled` condition (False, `Unschedulable`) seen while the taint was there, not from
    how many looks fit in the taint's time (fewer on a busy machine)."""

    def __init__(self, cluster: Cluster, uuid: str, device: str) -> None:
        self.cluster = cluster
        self.uuid = uuid
        self.device = device
        self.made = False
        self.samples = 0
        self.refused = False  # kube-scheduler's PodScheduled=False seen while tainted

    def sample(self) -> bool:
        """One look while the taint may be there; False once it is gone."""
        if not self.made:
            template = claim_template(
                "avoid-tainted", "gpu.gputopo.io", f"{ATTR}.uuid == '{self.uuid}'"
            )
            self.cluster.kubectl("apply", "-f", "-", stdin=json.dumps(template))
            pod = with_claim_template(busybox_pod("dra-avoid"), "avoid-tainted")
            self.cluster.kubectl("create", "-f", "-", stdin=json.dumps(pod))
            self.made = True
        status = self.cluster.pod("dra-avoid")["status"]
        names = [c["resourceClaimName"] for c in status.get("resourceClaimStatuses") or []]
        claim = {}
        if names:
            claim = json.loads(self.cluster.kubectl("get", "resourceclaim", names[0], "-o", "json"))
        allocation = (claim.get("status") or {}).get("allocation")
        if not tainted(self.cluster, self.device):
            return False
        assert allocation is None, f"allocated while {self.device} is tainted: {allocation}"
        assert status.get("phase") == "Pending"
        self.samples += 1
        self.refused = self.refused or any(
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
            for c in status.get("conditions") or []
        )
        return True

    def finish(self) -> None:
        """Look until the taint goes; then the claim was tried while it was there."""
        try:
            while self.sample():
                time.sleep(1)
        finally:
            self.cluster.delete_pods("dra-avoid")
        assert self.samples >= 1, f"no look while {self.device} was tainted"
        assert self.refused, (
            f"kube-scheduler never marked dra-avoid Unschedulable in {self.samples} looks while "
            f"{self.device} was tainted"
        )


def test_agent_restart_keeps_the_prepared_claim_and_the_kubelet_wipes_slices_of_a_gone_driver(
    cluster: Cluster, dra_agent
):
    template = claim_template("any-gpu", "gpu.gputopo.io")
    try:
        claim = run_pod(cluster, "dra-restart", template)
        spec = Path("/var/run/cdi") / f"k8s.gputopo.io-claim_{claim['metadata']['uid']}.json"
        assert spec.exists()
        dra_agent.stop()
        wait_until(lambda: not slices(cluster), 75, "the kubelet to wipe the driver's slices")
        dra_agent.start()
        wait_until(lambda: len(devices(cluster)) >= 8, 60, "the slices again")
        assert cluster.pod("dra-restart")["status"]["phase"] == "Running"
        assert spec.exists()
    finally:
        cluster.delete_pods("dra-restart")
    wait_until(lambda: not spec.exists(), 30, "the new agent to unprepare the claim")


def test_kubelet_restart_wipes_the_slices_and_the_agent_publishes_them_again(
    cluster: Cluster, dra_agent
):
    before = slice_uids(cluster)
    assert before
    gpus = cluster.node_allocatable("nvidia.com/gpu")  # the session agent's, when it runs
    template = claim_template("after-restart", "gpu.gputopo.io")
    cluster.restart_kubelet()
    wait_until(lambda: cluster.node_allocatable("nvidia.com/gpu") == gpus, 60,
               "the device plugin's GPUs back after the kubelet restart")  # fmt: skip
    wait_until(lambda: slice_uids(cluster) and not slice_uids(cluster) & before, 60,
               "slices re-created after the kubelet's wipe")  # fmt: skip
    try:
        claim = run_pod(cluster, "dra-after", template)
        (device,) = allocated(claim)
        assert visible(cluster, "dra-after") == [
            devices(cluster)[device]["attributes"]["uuid"]["string"]
        ]
    finally:
        cluster.delete_pods("dra-after")
