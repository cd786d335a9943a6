"""Load-aware placement through the real scheduler process (issue 47): the NRT carries what a
time-sliced GPU really uses (the agent's `memoryUsedMiB` ... `measuredAt`), the real client reads
it from the fake API server, and a replica that would not fit in the measured free memory waits
or goes elsewhere; a stale reading is ignored."""

from __future__ import annotations

import time
from typing import Any

from agent.gpu_load import GpuLoad, load_attributes
from tests.builders.nrt import make_shared_nrt
from tests.builders.scheduler import (
    create_pod,
    gpu_node,
    node_of,
    running,
    scheduled_condition,
    wait_for,
)
from tests.builders.shares import NRT, SHARED, agent_releasing_locks, share_body
from tests.builders.topology import dgx_h100


def loaded_node(fake: Any, custom: Any, name: str, *, used_gib: int, age_s: float) -> None:
    """An 8-GPU node whose GPU 0 is time-sliced into 4 replicas and uses `used_gib` GiB, as the
    agent measured `age_s` seconds ago."""
    gpu_node(fake, name, gpus=7, extra={SHARED: "4"})
    body = make_shared_nrt(name, dgx_h100(), shared=(0,), slots=4)
    load = GpuLoad(
        memory_used_mib=used_gib * 1024,
        sm_percent=90,
        power_w=600,
        measured_at=time.time() - age_s,
    )
    zone = next(z for z in body["zones"] if z["name"] == "gpu-0")
    zone["attributes"] += [{"name": k, "value": v} for k, v in load_attributes(load)]
    custom.create_cluster_custom_object(*NRT, body, _preload_content=False)


def test_a_gpu_using_70_of_80_gib_is_not_given_a_replica_that_needs_20(
    fake_api, core_v1, custom_objects
):
    loaded_node(fake_api, custom_objects, "n1", used_gib=70, age_s=12)
    with running(fake_api), agent_releasing_locks(fake_api):
        create_pod(core_v1, share_body("r", "20Gi"))
        condition = wait_for(lambda: scheduled_condition(fake_api, "r"), 10, "r refused")
        create_pod(core_v1, share_body("small", "8Gi"))
        wait_for(lambda: node_of(fake_api, "small"), 10, "the 8Gi share bound")
    assert node_of(fake_api, "r") is None
    assert "GPU 0 of node n1: 70Gi of 79.6Gi in use (measured 1" in condition["message"]
    assert "share needs 20Gi" in condition["message"]


def test_a_stale_reading_is_ignored(fake_api, core_v1, custom_objects):
    loaded_node(fake_api, custom_objects, "n1", used_gib=75, age_s=3600)
    with running(fake_api), agent_releasing_locks(fake_api):
        create_pod(core_v1, share_body("r", "20Gi"))
        assert wait_for(lambda: node_of(fake_api, "r"), 10, "r bound") == "n1"


def test_the_replica_goes_to_the_node_with_measured_room(fake_api, core_v1, custom_objects):
    loaded_node(fake_api, custom_objects, "a-busy", used_gib=70, age_s=5)
    loaded_node(fake_api, custom_objects, "b-idle", used_gib=2, age_s=5)
    with running(fake_api), agent_releasing_locks(fake_api):
        create_pod(core_v1, share_body("r", "20Gi"))
        assert wait_for(lambda: node_of(fake_api, "r"), 10, "r bound") == "b-idle"
