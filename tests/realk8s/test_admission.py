"""The shipped admission policies enforced by a real API server 1.37 (ValidatingAdmissionPolicy):
only gputopo-scheduler and gputopo-agent write `gputopo.io/*` pod annotations and share Leases.
A tenant (a user with RBAC rights to pods and Leases, as a namespace admin has) is refused; the
scheduler's ServiceAccount is not. The policies stay applied for the rest of the session, so the
share test after this one runs under them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, config

from agent.labels import Replication, SharingLabels, gfd_labels
from tests.builders.process import ROOT
from tests.builders.realk8s import NAMESPACE, Cluster, busybox_pod, wait_until
from tests.builders.topology import dgx_h100, mig_mixed

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(180)]
TENANT_RIGHTS = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: tenant-admin}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, create, update, patch, delete]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, create, update, patch, delete, deletecollection]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tenant-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tenant-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: tenant}
"""
FORGED = '{"main": "GPU-50679f0e-63af-44db-8989-74b23d854dbf"}'


@pytest.fixture(scope="module")
def policies(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "-f", "-", stdin=TENANT_RIGHTS)
    cluster.kubectl("apply", "-k", str(ROOT / "daemonset" / "optional" / "admission"))

    def enforced() -> bool:  # a policy takes effect once the server has compiled it
        body = busybox_pod("probe", annotations={"gputopo.io/gpus": FORGED})
        out = cluster.kubectl("create", "--dry-run=server", "-f", "-", check=False,
                              stdin=json.dumps(body), as_user="tenant")  # fmt: skip
        return "denied request" in out

    wait_until(enforced, 60, "the admission policies to take effect")
    return cluster


def test_a_tenant_cannot_create_a_pod_naming_its_gpu(policies: Cluster) -> None:
    body = busybox_pod("forged", annotations={"gputopo.io/gpus": FORGED})
    out = policies.kubectl("create", "-f", "-", stdin=json.dumps(body), check=False,
                           as_user="tenant")  # fmt: skip
    assert "only gputopo-scheduler and gputopo-agent write gputopo.io/ annotations" in out
    assert "gputopo.io/gpus" in out


def test_a_tenant_cannot_change_or_remove_the_annotation_the_scheduler_wrote(
    policies: Cluster,
) -> None:
    body = busybox_pod("plain", script="sleep 3600")
    policies.kubectl("create", "-f", "-", stdin=json.dumps(body), as_user="tenant")
    try:
        scheduler = policies.service_account_kubeconfig("gputopo-scheduler")
        patch = json.dumps({"metadata": {"annotations": {"gputopo.io/gpus": FORGED}}})
        # The scheduler's RBAC has no `get` on pods (kubectl patch reads first): a bare PATCH.
        core = client.CoreV1Api(config.new_client_from_config(str(scheduler)))
        core.patch_namespaced_pod("plain", "default", json.loads(patch))
        assert policies.pod("plain")["metadata"]["annotations"]["gputopo.io/gpus"] == FORGED
        moved = json.dumps({"metadata": {"annotations": {"gputopo.io/gpus": '{"main": "x"}'}}})
        by_tenant = policies.kubectl("patch", "pod", "plain", "-p", moved, check=False,
                                     as_user="tenant")  # fmt: skip
        assert "denied request" in by_tenant, by_tenant
        removed = json.dumps({"metadata": {"annotations": {"gputopo.io/gpus": None}}})
        by_tenant = policies.kubectl("patch", "pod", "plain", "-p", removed, check=False,
                                     as_user="tenant")  # fmt: skip
        assert "denied request" in by_tenant, by_tenant
        assert "gputopo.io/gpus" in policies.pod("plain")["metadata"]["annotations"]
        other = json.dumps({"metadata": {"annotations": {"team": "a"}}})
        assert "patched" in policies.kubectl("patch", "pod", "plain", "-p", other,
                                             as_user="tenant")  # fmt: skip
    finally:
        policies.delete_pods("plain")


def test_a_tenant_cannot_write_a_share_lease(policies: Cluster) -> None:
    lease = json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": f"gputopo-share-{policies.node}", "namespace": NAMESPACE,
                     "annotations": {"gputopo.io/shares": "{}"}},
        "spec": {"holderIdentity": "forged"},
    })  # fmt: skip
    out = policies.kubectl("apply", "-f", "-", stdin=lease, check=False, as_user="tenant")
    assert "denied request" in out, out
    assert "only gputopo-scheduler and" in out


def _lease(name: str, namespace: str, labels: dict[str, str] | None = None) -> str:
    return json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"holderIdentity": "probe"},
    })  # fmt: skip


def test_a_namespace_holding_a_lease_is_deleted_under_the_policies(policies: Cluster) -> None:
    """The namespace controller empties a namespace with a delete of each collection, which has
    no name in its admission request."""
    policies.kubectl("create", "namespace", "lease-holder")
    policies.kubectl("apply", "-f", "-", stdin=_lease("leader", "lease-holder"))
    policies.kubectl("delete", "namespace", "lease-holder", "--wait=false")

    def gone() -> bool:
        what = ("get", "namespace", "lease-holder", "--ignore-not-found", "-o", "name")
        return not policies.kubectl(*what)

    wait_until(gone, 60, "namespace lease-holder to be deleted")
    assert gone()


def test_a_tenant_cannot_delete_a_share_lease_with_its_collection(policies: Cluster) -> None:
    """A delete of a collection (not kubectl's delete -l, which deletes one by one) is admitted
    Lease by Lease: the share Lease in it is still refused. The probe Lease stays: the
    scheduler's Role has no delete, and the policy refuses anyone else."""
    scheduler = policies.service_account_kubeconfig("gputopo-scheduler")
    lease = _lease("gputopo-share-probe", NAMESPACE, {"gputopo.test/probe": "1"})
    policies.kubectl("create", "-f", "-", stdin=lease, kubeconfig=scheduler)
    tenant = client.CoordinationV1Api(
        config.new_client_from_config(str(policies.run_dir / "tenant.kubeconfig"))
    )
    with pytest.raises(client.ApiException) as refused:
        tenant.delete_collection_namespaced_lease(NAMESPACE, label_selector="gputopo.test/probe=1")
    assert "gputopo-share-leases" in str(refused.value.body)
    assert policies.kubectl("get", "lease", "gputopo-share-probe", "-n", NAMESPACE, "-o", "name")


def _node_labels(cluster: Cluster) -> dict[str, str]:
    node = json.loads(cluster.kubectl("get", "node", cluster.node, "-o", "json"))
    return dict(node["metadata"].get("labels") or {})


def test_the_agent_may_set_and_remove_every_label_it_writes_and_no_other(
    policies: Cluster,
) -> None:
    """Every GFD label the agent writes (MIG profiles, sharing, driver versions) passes the
    agent's own-node policy with the agent's node-bound token; a label of anyone else's does not."""
    sharing = SharingLabels(
        resources={"nvidia.com/gpu": Replication(4), "nvidia.com/mig-1g.10gb": Replication(2)}
    )
    written = {**gfd_labels(mig_mixed(), "mixed", sharing), **gfd_labels(dgx_h100(), "single")}
    assert any(k.startswith("nvidia.com/mig-") for k in written)
    assert any(k.startswith("nvidia.com/cuda.") for k in written)
    before = _node_labels(policies)
    agent = client.CoreV1Api(config.new_client_from_config(str(policies.agent_kubeconfig())))
    try:
        agent.patch_node(policies.node, {"metadata": {"labels": written}})
        assert {k: _node_labels(policies).get(k) for k in written} == written
        agent.patch_node(policies.node, {"metadata": {"labels": dict.fromkeys(written)}})
        assert not set(written) & set(_node_labels(policies))
        for forged in ("example.com/forged", "nvidia.com/gpu-forged", "nvidia.com/cudax"):
            with pytest.raises(client.ApiException) as refused:
                agent.patch_node(policies.node, {"metadata": {"labels": {forged: "x"}}})
            assert "may set and remove only GFD's labels" in str(refused.value.body), forged
    finally:  # the running agent's labels back, as the admin
        now = _node_labels(policies)
        restore: dict[str, str | None] = {k: None for k in now if k not in before}
        restore.update(before)
        policies.kubectl("patch", "node", policies.node, "-p",
                         json.dumps({"metadata": {"labels": restore}}))  # fmt: skip
