"""Our PodGroup CRD manifest: accepted by the API server, and the scheduler's status fits it."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import yaml
from kubernetes import client

from scheduler.kubeapi.client import KubeClient
from scheduler.runtime.cluster.cache import parse_group
from scheduler.runtime.cluster.podinfo import read_pod
from scheduler.runtime.gangs.gangstatus import GangProgress, LostMembers, group_status
from tests.builders.scheduler import (
    bound_pods,
    create_pod,
    create_podgroup,
    gpu_node,
    pod_body,
    podgroup,
    running,
    wait_for,
)
from tests.fakeapi import FakeApiServer
from tests.fakeapi.resources import crd_problems, nrt_crd

CRD = Path(__file__).resolve().parents[3] / "daemonset" / "crds" / "podgroup.yaml"


def manifest() -> dict:
    return yaml.safe_load(CRD.read_text(encoding="utf-8"))


def test_manifest_is_acceptable_and_matches_the_upstream_names():
    crd = manifest()
    assert crd_problems(crd) == []
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["scope"]) == (
        "scheduling.x-k8s.io",
        "PodGroup",
        "Namespaced",
    )
    version = spec["versions"][0]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    props = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(props["spec"]["properties"]) == {
        "minMember",
        "minResources",
        "scheduleTimeoutSeconds",
    }
    pattern = props["spec"]["properties"]["minResources"]["additionalProperties"]["pattern"]
    assert all(re.match(pattern, q) for q in ("8", "100m", "1.5Gi", "2e3"))
    assert not re.match(pattern, "lots")


def test_scheduler_status_fits_the_schema():
    fake = FakeApiServer(install_crds=False)
    fake.register_crd(nrt_crd())
    fake.register_crd(manifest())
    with fake:
        api = fake.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        gpu_node(fake, "n1")
        with running(fake):
            create_podgroup(custom, podgroup("g", 2))
            for i in range(2):
                labels = {"scheduling.x-k8s.io/pod-group": "g"}
                create_pod(core, pod_body(f"g-{i}", gpus=1, labels=labels))
            wait_for(lambda: len(bound_pods(fake)) == 2, 5, "gang bound")

            def status():
                found = (fake.get_object("podgroups", "g", "default") or {}).get("status") or {}
                return found if found.get("phase") == "Scheduled" else None

            found = wait_for(status, 5, "status written")
        api.close()
    schema = manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    allowed = set(schema["properties"]["status"]["properties"])
    assert set(found) <= allowed
    assert found["scheduled"] == 2


def test_members_lost_condition_is_kept_by_the_schema():
    """The scheduler's `MembersLost` status survives the manifest's structural schema (pruning)."""
    fake = FakeApiServer(install_crds=False)
    fake.register_crd(manifest())
    with fake:
        api = fake.api_client()
        custom = client.CustomObjectsApi(api)
        create_podgroup(custom, podgroup("g", 2))
        group = parse_group(fake.get_object("podgroups", "g", "default") or {})
        member = read_pod(pod_body("g-1", gpus=1, node="n1"), "gputopo-scheduler")
        losses = LostMembers()
        losses.observe(replace(member, uid="u1"), deleted=False)
        loss = losses.observe(replace(member, uid="u1"), deleted=True)
        assert loss is not None
        losses.record(loss, "2026-01-01T00:00:00Z")
        status = group_status(group, [], GangProgress(losses=losses))
        kube = KubeClient(api, "gputopo-scheduler", "test")
        kube.patch_podgroup_status("default", "g", status)
        stored = (fake.get_object("podgroups", "g", "default") or {}).get("status") or {}
        api.close()
    assert stored == status
    assert stored["phase"] == "Unknown"
    assert stored["conditions"][0]["reason"] == "PodDeleted"
