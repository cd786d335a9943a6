"""The DRA kubelet plugin over real unix sockets, driven by the DRA kubelet emulator, reading claims
through the agent's Kubernetes I/O from the fake API server."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from agent.dra import DRIVER, GROUP, VERSION
from agent.dra.devices import dra_devices
from agent.kube.dra import KubeDra
from agent.podgroup import podgroup_consumer
from deviceplugin._pb import dra_health_v1alpha1_pb2 as health_pb
from deviceplugin.device_state import DeviceState
from deviceplugin.dra.mps_edits import MpsEdits
from deviceplugin.dra.plugin import DraPaths, DraPlugin
from deviceplugin.testing.dra_kubelet import DraKubelet, PrepareCallError
from tests.builders.deviceplugin import make_inventory
from tests.builders.dra import allocation_status, make_claim
from tests.builders.fakeapi import make_pod
from tests.fakeapi import FakeApiServer

NODE = "gpu-node-1"
NS = "default"


@pytest.fixture
def paths() -> Iterator[DraPaths]:
    with tempfile.TemporaryDirectory(dir="/tmp") as root:
        base = Path(root)
        yield DraPaths(
            registry_dir=base / "registry", plugins_dir=base / "plugins", cdi_dir=base / "cdi"
        )


@pytest.fixture
def inventory():
    return make_inventory(4, mig={3: ["3g.40gb", "3g.40gb"]})


@pytest.fixture
def node(fake_api: FakeApiServer):
    fake_api.add_node(NODE)
    fake_api.add_node("other-node")
    return NODE


class Rig:
    def __init__(self, fake: FakeApiServer, paths: DraPaths, inventory) -> None:
        self.fake = fake
        self.paths = paths
        self.state = DeviceState()
        self.devices = dra_devices(inventory, range(4))
        self.api = fake.api_client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.plugin: DraPlugin | None = None
        self.kubelet = DraKubelet(paths.registry_dir)

    def start_plugin(self, **kw) -> DraPlugin:
        self.plugin = DraPlugin(
            node=NODE,
            paths=self.paths,
            reader=KubeDra(self.api, NODE),
            devices=lambda: self.devices,
            state=self.state,
            **kw,
        )
        self.plugin.start()
        return self.plugin

    def pod(self, name: str, node: str = NODE) -> tuple[str, str]:
        made = self.core.create_namespaced_pod(NS, make_pod(name, node=node))
        return name, made.metadata.uid

    def claim(self, name: str, devices, pods, result=None, **kw) -> tuple[str, str, str]:
        """A claim allocated `devices` for `pods`; `result`: fields every result gets (a share's
        `shareID`, `consumedCapacity`), written with the allocation (it is immutable after)."""
        requests = tuple(dict.fromkeys(r for r, _ in devices)) or ("gpu",)
        made = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "resourceclaims", make_claim(name, requests)
        )
        status = allocation_status(NODE, devices, pods, **kw)
        for entry in status["status"]["allocation"]["devices"]["results"]:
            entry.update(result or {})
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, NS, "resourceclaims", name, status
        )
        return NS, name, made["metadata"]["uid"]

    def close(self) -> None:
        self.kubelet.close()
        if self.plugin is not None:
            self.plugin.stop()
        self.api.close()


@pytest.fixture
def rig(fake_api, paths, inventory, node) -> Iterator[Rig]:
    made = Rig(fake_api, paths, inventory)
    yield made
    made.close()


def test_registers_as_a_dra_plugin_offering_v1_first(rig):
    rig.start_plugin()
    assert rig.kubelet.scan() == [DRIVER]
    reg = rig.kubelet.plugins[DRIVER]
    assert reg.service == "v1.DRAPlugin"
    assert reg.advertised == ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")
    assert reg.endpoint == str(rig.paths.service_socket)
    assert rig.plugin.registration.statuses == [(True, "")]


def test_prepare_writes_a_cdi_spec_and_answers_its_ids(rig):
    rig.start_plugin()
    rig.kubelet.scan()
    pod = rig.pod("train")
    claim = rig.claim("two", [("gpu", "gpu-0"), ("gpu", "gpu-2")], [pod])
    uid = claim[2]
    (devices,) = rig.kubelet.prepare(DRIVER, [claim]).values()
    assert [d.device for d in devices] == ["gpu-0", "gpu-2"]
    assert devices[0].cdi_ids == (f"k8s.gputopo.io/claim={uid}-gpu-0",)
    assert devices[0].pool == NODE
    assert devices[0].requests == ("gpu",)
    spec = json.loads((rig.paths.cdi_dir / f"k8s.gputopo.io-claim_{uid}.json").read_text())
    assert spec["kind"] == "k8s.gputopo.io/claim"
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-gpu-0", f"{uid}-gpu-2"]
    want = f"NVIDIA_VISIBLE_DEVICES={rig.devices[0].uuid},{rig.devices[2].uuid}"
    assert spec["devices"][0]["containerEdits"]["env"] == [want]


def test_a_mig_device_is_prepared_with_its_mig_uuid(rig):
    rig.start_plugin()
    rig.kubelet.scan()
    mig = next(d for d in rig.devices if d.name == "gpu-3-mig-3g-40gb-4")
    claim = rig.claim("mig", [("mig", mig.name)], [rig.pod("small")])
    rig.kubelet.prepare(DRIVER, [claim])
    spec = json.loads((rig.paths.cdi_dir / f"k8s.gputopo.io-claim_{claim[2]}.json").read_text())
    assert spec["devices"][0]["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={mig.uuid}"]


def test_prepare_is_idempotent_and_survives_plugin_and_kubelet_restarts(rig):
    rig.start_plugin()
    rig.kubelet.scan()
    claim = rig.claim("c", [("gpu", "gpu-1")], [rig.pod("p")])
    first = rig.kubelet.prepare(DRIVER, [claim])
    rig.custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", "c")
    assert rig.kubelet.prepare(DRIVER, [claim]) == first  # from the record: no GET
    rig.plugin.stop()
    rig.start_plugin()
    rig.kubelet.restart()
    assert rig.kubelet.prepare(DRIVER, [claim]) == first
    assert rig.kubelet.unprepare(DRIVER, [claim]) == {claim[2]: ""}
    assert list(rig.paths.cdi_dir.glob("*.json")) == []
    assert rig.kubelet.unprepare(DRIVER, [claim]) == {claim[2]: ""}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        pytest.param("other-node", "none of them on this node", id="reserved for a pod elsewhere"),
        pytest.param("unknown-device", "gpu-9 is not published", id="device not ours"),
        pytest.param("missing", "not found", id="claim gone"),
        pytest.param("unallocated", "status.allocation: not allocated", id="not allocated"),
    ],
)
def test_a_claim_this_node_may_not_prepare_gets_its_own_error(rig, case, message):
    rig.start_plugin()
    rig.kubelet.scan()
    good = rig.claim("good", [("gpu", "gpu-0")], [rig.pod("p")])
    if case == "other-node":
        bad = rig.claim("bad", [("gpu", "gpu-1")], [rig.pod("q", node="other-node")])
    elif case == "unknown-device":
        bad = rig.claim("bad", [("gpu", "gpu-9")], [rig.pod("q")])
    elif case == "missing":
        bad = (NS, "bad", "0000")
    else:
        made = rig.custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "resourceclaims", make_claim("bad")
        )
        bad = (NS, "bad", made["metadata"]["uid"])
    out = rig.kubelet.prepare(DRIVER, [good, bad])
    assert isinstance(out[good[2]], tuple)
    assert message in out[bad[2]]
    assert "ResourceClaim default/bad" in out[bad[2]]
    assert not (rig.paths.cdi_dir / f"k8s.gputopo.io-claim_{bad[2]}.json").exists()


@pytest.mark.parametrize(
    ("node", "group", "prepared"),
    [
        pytest.param(NODE, "g", True, id="a member of the group here"),
        pytest.param(NODE, "other", False, id="a pod of another group here"),
        pytest.param("other-node", "g", False, id="the group's pods elsewhere"),
    ],
)
def test_a_claim_reserved_for_a_podgroup_serves_its_members_on_this_node(
    rig, node, group, prepared
):
    rig.start_plugin()
    rig.kubelet.scan()
    body = make_pod("member", node=node)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    rig.core.create_namespaced_pod(NS, body)
    claim = rig.claim("shared", [("gpu", "gpu-1")], [])
    consumer = podgroup_consumer("g", "uid-g")
    status = {"status": {"reservedFor": [consumer]}}
    rig.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, "resourceclaims", "shared", status
    )
    out = rig.kubelet.prepare(DRIVER, [claim])
    if prepared:
        assert [d.device for d in out[claim[2]]] == ["gpu-1"]
    else:
        assert "names PodGroup g (no pod of it), none of them on this node" in out[claim[2]]


def test_a_request_with_an_empty_uid_is_invalid_and_the_plugin_keeps_serving(rig):
    rig.start_plugin()
    rig.kubelet.scan()
    with pytest.raises(PrepareCallError, match=r"INVALID_ARGUMENT.*claims\[0\]\.uid is empty"):
        rig.kubelet.prepare(DRIVER, [(NS, "x", "")])
    claim = rig.claim("c", [("gpu", "gpu-1")], [rig.pod("p")])
    assert isinstance(rig.kubelet.prepare(DRIVER, [claim])[claim[2]], tuple)


def test_results_of_other_drivers_are_left_to_them(rig):
    rig.start_plugin()
    rig.kubelet.scan()
    claim = rig.claim("nic", [("nic", "eth0")], [rig.pod("p")], driver="nic.example.com")
    assert rig.kubelet.prepare(DRIVER, [claim]) == {claim[2]: ()}


def test_health_stream_sends_the_whole_list_and_marks_an_xid_unhealthy(rig):
    rig.start_plugin()
    rig.kubelet.scan()
    rig.kubelet.watch_health(DRIVER)
    healthy, unhealthy = health_pb.HEALTHY, health_pb.UNHEALTHY
    assert rig.kubelet.wait_health(DRIVER, f"{NODE}/gpu-0", healthy)
    assert len(rig.kubelet.plugins[DRIVER].health) == len(rig.devices)
    rig.state.set_unhealthy(frozenset({rig.devices[0].gpu_uuid, rig.devices[3].gpu_uuid}))
    assert rig.kubelet.wait_health(DRIVER, f"{NODE}/gpu-0", unhealthy)
    assert rig.kubelet.wait_health(DRIVER, f"{NODE}/gpu-3-mig-3g-40gb-0", unhealthy)
    assert rig.kubelet.plugins[DRIVER].health[f"{NODE}/gpu-1"] == healthy
    rig.state.set_unhealthy(frozenset())
    assert rig.kubelet.wait_health(DRIVER, f"{NODE}/gpu-0", healthy)


def test_while_mps_does_not_serve_a_shared_gpu_is_unhealthy_and_a_whole_one_is_not(rig, inventory):
    rig.devices = dra_devices(inventory, range(3), shared={1: 4})
    rig.start_plugin()
    rig.kubelet.scan()
    rig.kubelet.watch_health(DRIVER)
    healthy, unhealthy = health_pb.HEALTHY, health_pb.UNHEALTHY
    assert rig.kubelet.wait_health(DRIVER, f"{NODE}/gpu-1", healthy)
    rig.state.set_down({}, "MPS control daemon down for uid 1000 (exited)")
    assert rig.kubelet.wait_health(DRIVER, f"{NODE}/gpu-1", unhealthy)
    assert rig.kubelet.plugins[DRIVER].health[f"{NODE}/gpu-0"] == healthy
    rig.state.set_down({}, None)
    assert rig.kubelet.wait_health(DRIVER, f"{NODE}/gpu-1", healthy)


def test_two_shares_of_one_gpu_are_prepared_with_their_share_ids(rig):
    rig.start_plugin()
    rig.kubelet.scan()
    first, second = (
        rig.claim(
            f"share-{pod}",
            [("gpu", "gpu-1")],
            [rig.pod(pod)],
            result={"shareID": share, "consumedCapacity": {"memory": "20Gi"}},
        )
        for pod, share in (("a", "aaaa1"), ("b", "bbbb2"))
    )
    out = rig.kubelet.prepare(DRIVER, [first, second])
    assert [(d.device, d.share_id) for d in out[first[2]]] == [("gpu-1", "aaaa1")]
    assert [(d.device, d.share_id) for d in out[second[2]]] == [("gpu-1", "bbbb2")]
    record = {c.uid: c.devices[0].share_id for c in rig.plugin.record.claims()}
    assert record == {first[2]: "aaaa1", second[2]: "bbbb2"}


def test_health_is_sent_again_without_a_change_before_the_kubelets_30_s_timeout(rig):
    rig.start_plugin(health_resend_s=0.2)
    rig.kubelet.scan()
    rig.kubelet.watch_health(DRIVER)
    reg = rig.kubelet.plugins[DRIVER]
    assert rig.kubelet.wait_health(DRIVER, f"{NODE}/gpu-0", health_pb.HEALTHY)
    first = reg.health_messages
    deadline = time.monotonic() + 5
    while reg.health_messages < first + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reg.health_messages >= first + 3


def test_a_kubelet_that_speaks_only_v1beta1_prepares_through_it(rig):
    rig.start_plugin()
    old = DraKubelet(rig.paths.registry_dir, services=["v1beta1.DRAPlugin"])
    try:
        assert old.scan() == [DRIVER]
        assert old.plugins[DRIVER].service == "v1beta1.DRAPlugin"
        claim = rig.claim("c", [("gpu", "gpu-2")], [rig.pod("p")])
        (device,) = old.prepare(DRIVER, [claim])[claim[2]]
        assert (device.device, device.share_id) == ("gpu-2", None)
        assert old.unprepare(DRIVER, [claim]) == {claim[2]: ""}
    finally:
        old.close()


def test_a_kubelet_that_speaks_no_dra_version_we_offer_refuses_the_plugin(rig):
    rig.start_plugin()
    future = DraKubelet(rig.paths.registry_dir, services=["v2.DRAPlugin"])
    assert future.scan() == []
    assert rig.plugin.registration.statuses == [
        (False, future.refused[str(rig.paths.registration_socket)])
    ]


def test_under_mps_a_share_gets_the_limits_of_its_allocation_and_keeps_them(rig, inventory):
    rig.devices = dra_devices(inventory, range(3), shared={1: 4})
    rig.start_plugin(share_edits=MpsEdits("/run/mps", lambda: frozenset({1000})))
    rig.kubelet.scan()
    made = make_pod("a", node=NODE)
    made["spec"]["securityContext"] = {"runAsUser": 1000}
    pod = rig.core.create_namespaced_pod(NS, made)
    claims = {}
    for name, consumed in (("asks", {"memory": "20Gi", "compute": "30"}), ("split", {})):
        result = {"shareID": f"share-{name}", "consumedCapacity": consumed}
        claims[name] = rig.claim(name, [("gpu", "gpu-1")], [("a", pod.metadata.uid)], result=result)
    rig.kubelet.prepare(DRIVER, list(claims.values()))

    def edits(name):
        uid = claims[name][2]
        spec = json.loads((rig.paths.cdi_dir / f"k8s.gputopo.io-claim_{uid}.json").read_text())
        return spec["devices"][0]["containerEdits"]

    split_mib = rig.devices[1].share_memory_mib
    assert edits("asks")["env"] == [
        f"NVIDIA_VISIBLE_DEVICES={rig.devices[1].uuid}",
        "CUDA_MPS_PIPE_DIRECTORY=/run/mps/1000/pipe",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
    ]
    assert edits("split")["env"][2:] == [
        f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={split_mib}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
    ]
    assert [(m["hostPath"], m["containerPath"]) for m in edits("asks")["mounts"]] == [
        ("/run/mps/1000/pipe", "/run/mps/1000/pipe"),
        ("/run/mps/1000/shm", "/dev/shm"),
    ]
    before = edits("asks")
    rig.plugin.stop()  # an agent restart: the record answers, the spec is written the same
    for spec in rig.paths.cdi_dir.iterdir():
        spec.unlink()
    rig.start_plugin()
    rig.kubelet.scan()
    rig.kubelet.prepare(DRIVER, [claims["asks"]])
    assert edits("asks") == before


def test_under_mps_a_share_of_an_unserved_user_is_refused(rig, inventory):
    rig.devices = dra_devices(inventory, range(3), shared={1: 4})
    rig.start_plugin(share_edits=MpsEdits("/run/mps", lambda: frozenset({1000})))
    rig.kubelet.scan()
    claim = rig.claim("c", [("gpu", "gpu-1")], [rig.pod("a")])  # no runAsUser: root
    out = rig.kubelet.prepare(DRIVER, [claim])
    assert "ResourceClaim default/c" in out[claim[2]]
    assert "sets no runAsUser and MPS does not serve root here (MPS users: 1000)" in out[claim[2]]
    assert not (rig.paths.cdi_dir / f"k8s.gputopo.io-claim_{claim[2]}.json").exists()
