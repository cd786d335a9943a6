"""The DRA component's ClusterRole (daemonset/optional/dra/dra.yaml) grants exactly what the DRA
driver calls beyond the agent's own role: derived from the fake API server's authorization checks
while the slice publisher creates, replaces and deletes slices and the kubelet plugin prepares a
claim."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from kubernetes import client

from agent.dra import DRIVER, GROUP, SLICES, VERSION
from agent.dra.devices import dra_devices
from agent.kube.dra import KubeDra, SlicePublisher
from deviceplugin.device_state import DeviceState
from deviceplugin.dra.plugin import DraPaths, DraPlugin
from deviceplugin.testing.dra_kubelet import DraKubelet
from tests.builders import manifests as checks
from tests.builders import rbac
from tests.builders import render as r
from tests.builders.deviceplugin import make_inventory
from tests.builders.dra import allocation_status, make_claim
from tests.builders.fakeapi import make_pod

NODE = "gpu-node-1"
TOKEN = "dra-agent"
DRA_YAML = r.OPTIONAL / "dra" / "dra.yaml"


def _dra_role() -> set[rbac.Permission]:
    role = next(
        o for o in yaml.safe_load_all(DRA_YAML.read_text()) if o and o["kind"] == "ClusterRole"
    )
    return checks.expand_rules(role["rules"], rbac.CLUSTER)


def _agent_role() -> set[rbac.Permission]:
    objects = tuple(r.render().objects)
    namespace = rbac.service_account_namespace(objects, "gputopo-agent")
    return rbac.effective_permissions(objects, "gputopo-agent", namespace)


def _drive(fake) -> None:
    """Slices created, replaced (an Xid), a stale one deleted; one claim prepared."""
    fake.add_node(NODE)
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    spec = {"driver": DRIVER, "nodeName": NODE, "devices": [], "pool": pool}
    stale = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice"}
    stale.update(metadata={"name": "stale"}, spec=spec)
    fake.put_object(SLICES, stale)
    inventory = make_inventory(2)
    unhealthy: set[str] = set()
    api = fake.api_client(TOKEN)
    devices = dra_devices(inventory, range(2))
    publisher = SlicePublisher(KubeDra(api, NODE), lambda: devices, lambda: unhealthy)
    publisher.step()
    unhealthy.add(devices[0].name)
    publisher.step()
    admin = fake.api_client()
    pod = client.CoreV1Api(admin).create_namespaced_pod("default", make_pod("p", node=NODE))
    custom = client.CustomObjectsApi(admin)
    claim = custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "resourceclaims", make_claim("c")
    )
    status = allocation_status(NODE, [("gpu", "gpu-1")], [("p", pod.metadata.uid)])
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "resourceclaims", "c", status
    )
    with tempfile.TemporaryDirectory(dir="/tmp") as root:
        paths = DraPaths(registry_dir=Path(root) / "reg", plugins_dir=Path(root) / "plugins",
                         cdi_dir=Path(root) / "cdi")  # fmt: skip
        plugin = DraPlugin(node=NODE, paths=paths, reader=KubeDra(api, NODE),
                           devices=lambda: devices, state=DeviceState())  # fmt: skip
        plugin.start()
        kubelet = DraKubelet(paths.registry_dir)
        try:
            kubelet.scan()
            uid = claim["metadata"]["uid"]
            assert isinstance(kubelet.prepare(DRIVER, [("default", "c", uid)])[uid], tuple)
        finally:
            kubelet.close()
            plugin.stop()
    api.close()
    admin.close()


def test_dra_role_grants_exactly_what_the_driver_calls_beyond_the_agents_role(fake_api):
    _drive(fake_api)
    calls = [c for c in fake_api.authorization_checks if c.user == TOKEN]
    used = rbac.used_permissions(calls, "gputopo-agent")
    beyond = used - _agent_role()
    assert rbac.describe(_dra_role()) == rbac.describe(beyond)  # no more, no less
