"""The shipped admission policies enforced by a real API server 1.37 (ValidatingAdmissionPolicy):
only gputopo-scheduler and gputopo-agent write `gputopo.io/*` pod annotations and share Leases.
A tenant (a user with RBAC rights to pods and Leases, as a namespace admin has) is refused; the
scheduler's ServiceAccount is not. The policies stay applied for the rest of the session, so the
share test after this one runs under them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, config

from tests.builders.process import ROOT
from tests.builders.realk8s import NAMESPACE, Cluster, busybox_pod, wait_until

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
  verbs: [get, list, create, update, patch, delete]
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
