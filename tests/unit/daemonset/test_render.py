"""`kubectl apply -k daemonset/` input: what the kustomization lists and what it renders."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.builders import render as r

EXPECTED_RESOURCES = [
    "namespace.yaml",
    "rbac-agent.yaml",
    "rbac-scheduler.yaml",
    "configmaps.yaml",
    "networkpolicies.yaml",
    "agent-daemonset.yaml",
    "scheduler-deployment.yaml",
]


def test_kustomization_lists_every_part_of_the_install():
    kust = r.kustomization()
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kust["kind"] == "Kustomization"
    assert "namespace" not in kust  # two namespaces: each file names its own
    assert kust["resources"] == EXPECTED_RESOURCES
    assert kust["components"] == ["image"]  # the one image setting


def test_crds_are_a_kustomization_of_their_own_that_the_install_leaves_out():
    """`kubectl delete -k daemonset/` must not delete a CRD: PodGroup and NodeResourceTopology
    are shared with other projects, and deleting a CRD deletes every object of its kind."""
    crds = r.kustomization(r.CRDS)
    assert crds["kind"] == "Kustomization"
    assert crds["resources"] == ["noderesourcetopology.yaml", "podgroup.yaml", "queue.yaml"]
    on_disk = {p.name for p in r.CRDS.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(crds["resources"]) == on_disk
    assert not any("crds" in x for x in r.kustomization()["resources"])


def test_the_install_renders_no_crd_and_the_crds_folder_only_crds(objects, crds):
    assert r.by_kind(objects, "CustomResourceDefinition") == []
    assert {c["spec"]["names"]["kind"] for c in crds} == {
        "NodeResourceTopology",
        "PodGroup",
        "Queue",
    }
    assert len(r.render(r.CRDS).objects) == len(crds)


def test_kustomization_leaves_out_files_that_are_not_cluster_objects():
    listed = set(r.kustomization()["resources"])
    assert not any(x.startswith(("examples", "optional")) or "Containerfile" in x for x in listed)
    assert "README.md" not in listed


def test_every_yaml_file_in_daemonset_is_listed_or_an_example():
    """A manifest nobody lists would silently not be installed."""
    listed = set(r.kustomization()["resources"]) | {"kustomization.yaml"}
    listed |= {f"crds/{x}" for x in r.kustomization(r.CRDS)["resources"]}
    listed |= {"crds/kustomization.yaml", "image/kustomization.yaml"}
    on_disk = {
        str(p.relative_to(r.DAEMONSET))
        for p in r.DAEMONSET.rglob("*.yaml")
        if not {r.EXAMPLES, r.OPTIONAL, r.HELM} & set(p.parents)
    }
    assert on_disk - listed == set()


def test_optional_holds_only_opt_in_kustomizations():
    folders = sorted(
        str(p.parent.relative_to(r.OPTIONAL)) for p in r.OPTIONAL.rglob("kustomization.yaml")
    )
    assert folders == [
        "admission",
        "cdi",
        "dra",
        "dra/extended-resource",
        "kubelet-config/eks",
        "kubelet-config/gke",
        "kubelet-config/kubeadm",
        "monitoring",
        "mps",
        "queue-label",
        "upstream-nrt-crd",
    ]
    assert sorted(p.name for p in r.OPTIONAL.iterdir()) == sorted(
        {f.partition("/")[0] for f in folders}
    )


def test_no_listed_file_is_missing(rendered):
    assert rendered.missing == ()


def test_render_produces_the_install(objects):
    kinds = Counter(o["kind"] for o in objects)
    assert kinds["Namespace"] == 2
    assert kinds["NetworkPolicy"] == 2
    assert kinds["ServiceAccount"] == 2
    assert kinds["ClusterRole"] == 2
    assert kinds["ClusterRoleBinding"] == 2
    assert kinds["Role"] == 2  # the scheduler's leases, the agent's share locks
    assert kinds["RoleBinding"] == 2
    assert kinds["ConfigMap"] == 2
    assert kinds["DaemonSet"] == 1
    assert kinds["Deployment"] == 1


def test_rendered_objects_are_unique_and_named(objects):
    keys = [r.key(o) for o in objects]
    assert len(keys) == len(set(keys))
    assert all(o["metadata"].get("name") for o in objects)


NAMESPACE_OF = {"agent": "gputopo-agent", "scheduler": "gputopo-system"}
SHARE_LOCKS = "gputopo-agent-share-locks"
"""The agent's Role on the share locks: in the scheduler's namespace, where the Leases are."""


def test_each_component_lands_in_its_own_namespace(objects):
    placed = {
        r.key(o): o["metadata"].get("namespace")
        for o in objects
        if o["kind"] not in r.CLUSTER_SCOPED_KINDS
    }
    expected = {
        r.key(o): NAMESPACE_OF[
            "scheduler"
            if o["metadata"]["name"] == SHARE_LOCKS
            else o["metadata"]["labels"]["app.kubernetes.io/component"]
        ]
        for o in objects
        if o["kind"] not in r.CLUSTER_SCOPED_KINDS
    }
    assert placed == expected
    cluster_scoped = [o for o in objects if o["kind"] in r.CLUSTER_SCOPED_KINDS]
    assert all("namespace" not in o["metadata"] for o in cluster_scoped)


def test_namespaces_come_first_so_apply_creates_them_before_their_contents(objects):
    assert [o["kind"] for o in objects[:2]] == ["Namespace", "Namespace"]
    assert {o["metadata"]["name"] for o in objects[:2]} == set(NAMESPACE_OF.values())


def test_fallback_renderer_agrees_with_kubectl(rendered):
    """The fallback used on machines without kubectl must yield the same objects."""
    if rendered.renderer != "kubectl":
        pytest.skip("no kubectl on this machine: only the fallback renderer ran")
    fallback = r.render(use_kubectl=False)
    assert sorted(map(r.key, fallback.objects)) == sorted(map(r.key, rendered.objects))
    by_key = {r.key(o): o for o in rendered.objects}
    differ = [r.key(o) for o in fallback.objects if by_key[r.key(o)] != o]
    assert differ == []


def test_render_reports_a_missing_resource(tmp_path):
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [a.yaml, gone.yaml]\nnamespace: ns1\n", encoding="utf-8"
    )
    (tmp_path / "a.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", encoding="utf-8"
    )
    out = r.render(tmp_path)
    assert out.missing == ("gone.yaml",)
    assert [r.key(o) for o in out.objects] == [("v1", "ConfigMap", "ns1", "a")]


def _readme_kubectl_lines() -> list[str]:
    readme = (r.REPO / "README.md").read_text(encoding="utf-8")
    return [line.strip() for line in readme.splitlines() if line.strip().startswith("kubectl ")]


def test_the_readme_applies_the_crds_first_and_never_deletes_them_wholesale():
    lines = _readme_kubectl_lines()
    commands = [line.split("#")[0].strip() for line in lines]
    applies = [c for c in commands if c.startswith("kubectl apply -k daemonset/")]
    assert applies.index("kubectl apply -k daemonset/crds/") < applies.index(
        "kubectl apply -k daemonset/"
    )
    assert "kubectl delete -k daemonset/" in commands
    assert [c for c in commands if c.startswith("kubectl delete -k daemonset/crds")] == []
    shared = [x for x in lines if re.match(r"kubectl delete -f daemonset/crds/(podgroup|noder)", x)]
    assert len(shared) == 2
    assert all("# ONLY if no " in x for x in shared)  # the warning is on the command's own line
