"""The DRA component's admission policy (daemonset/optional/dra/slice-policy.yaml) enforced by a
real API server 1.37: the agent's ServiceAccount, with a token bound to a pod on its node (as a
DaemonSet pod's is: the token names the node), writes its own node's ResourceSlices of
gpu.gputopo.io and nothing else, though its ClusterRole grants slice writes cluster-wide."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.dra import DRIVER
from tests.builders.process import ROOT
from tests.builders.realk8s import Cluster, wait_until

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(180)]
DRA = ROOT / "daemonset" / "optional" / "dra"
OTHER_NODE = "some-other-node"


def slice_doc(name: str, node: str, *, pool: str | None = None, driver: str = DRIVER) -> str:
    return json.dumps({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node, "devices": [],
                 "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1}},
    })  # fmt: skip


@pytest.fixture(scope="module")
def agent_token(cluster: Cluster) -> Iterator[Path]:
    cluster.kubectl("apply", "-f", str(DRA / "dra.yaml"))
    cluster.kubectl("apply", "-f", str(DRA / "slice-policy.yaml"))
    kubeconfig = cluster.agent_kubeconfig()

    def enforced() -> bool:  # a policy takes effect once the server has compiled it
        probe = slice_doc("probe", OTHER_NODE)
        out = write(cluster, kubeconfig, "create", "--dry-run=server", "-f", "-", stdin=probe)
        return "denied request" in out

    wait_until(enforced, 60, "the slice policy to take effect")
    yield kubeconfig
    cluster.kubectl("delete", "resourceslice", "gputopo-probe-own", "gputopo-probe-other",
                    "--ignore-not-found")  # fmt: skip


def write(cluster: Cluster, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    return cluster.kubectl(*args, check=False, stdin=stdin, kubeconfig=kubeconfig)


def at_version(cluster: Cluster, doc: str) -> str:
    """`doc` with the resourceVersion the server holds (the agent may not get a slice, and
    kubectl replace reads one first where the object has none)."""
    obj: dict[str, Any] = json.loads(doc)
    held = json.loads(
        cluster.kubectl("get", "resourceslice", obj["metadata"]["name"], "-o", "json")
    )
    obj["metadata"]["resourceVersion"] = held["metadata"]["resourceVersion"]
    return json.dumps(obj)


DELETE = ("delete", "resourceslice", "--wait=false")


def test_the_agent_creates_replaces_and_deletes_its_own_nodes_slice(
    cluster: Cluster, agent_token: Path
) -> None:
    own = slice_doc("gputopo-probe-own", cluster.node)
    out = write(cluster, agent_token, "create", "-f", "-", stdin=own)
    assert "created" in out, out
    replaced: dict[str, Any] = json.loads(at_version(cluster, own))
    replaced["spec"]["pool"]["generation"] = 2
    out = write(cluster, agent_token, "replace", "-f", "-", stdin=json.dumps(replaced))
    assert "replaced" in out, out
    out = write(cluster, agent_token, *DELETE, "gputopo-probe-own")
    assert "deleted" in out, out


@pytest.mark.parametrize(
    ("node", "pool", "driver"),
    [
        pytest.param(OTHER_NODE, None, DRIVER, id="another node's"),
        pytest.param(None, OTHER_NODE, DRIVER, id="its node, another node's pool"),
        pytest.param(None, None, "gpu.nvidia.com", id="its node, another driver"),
    ],
)
def test_the_agent_cannot_create_a_slice_not_of_its_node_and_driver(
    cluster: Cluster, agent_token: Path, node: str | None, pool: str | None, driver: str
) -> None:
    doc = slice_doc("gputopo-probe-refused", node or cluster.node, pool=pool, driver=driver)
    out = write(cluster, agent_token, "create", "-f", "-", stdin=doc)
    assert "denied request" in out, out
    assert "may write only ResourceSlices of gpu.gputopo.io for its node" in " ".join(out.split())


def test_the_agent_cannot_replace_or_delete_another_nodes_slice(
    cluster: Cluster, agent_token: Path
) -> None:
    cluster.kubectl("create", "-f", "-", stdin=slice_doc("gputopo-probe-other", OTHER_NODE))
    # spec.nodeName and spec.pool are immutable: a replace keeps them, and is refused for them
    held = at_version(cluster, slice_doc("gputopo-probe-other", OTHER_NODE))
    bumped: dict[str, Any] = json.loads(held)
    bumped["spec"]["pool"]["generation"] = 2
    out = write(cluster, agent_token, "replace", "-f", "-", stdin=json.dumps(bumped))
    assert "denied request" in out, out
    out = write(cluster, agent_token, *DELETE, "gputopo-probe-other")
    assert "denied request" in out, out
    assert "may replace or delete only the ResourceSlices" in " ".join(out.split())
    assert cluster.kubectl("get", "resourceslice", "gputopo-probe-other", "-o", "name")
