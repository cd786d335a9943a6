"""DeviceTaintRules (resource.k8s.io/v1, 1.37) read by gputopo-scheduler against the fake API
server, through the real client: a claim waits while the rules taint too many devices, naming
the taints, and binds once a rule is deleted (a watch event), on the devices no rule taints."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.builders.claimcluster import claim_pod, devices_of, dra_cluster, gpu_claim
from tests.builders.claims import taint_rule_obj
from tests.builders.scheduler import create_pod, node_of, running, scheduled_condition
from tests.builders.wait import wait_for

GROUP, VERSION, RULES = "resource.k8s.io", "v1", "devicetaintrules"


def _rules_api(fake_api: Any) -> tuple[Any, client.CustomObjectsApi]:
    api = fake_api.api_client()
    return api, client.CustomObjectsApi(api)


def test_a_claim_waits_on_tainted_devices_and_binds_when_a_rule_goes(fake_api, core_v1):
    dra_cluster(fake_api)  # n1: gpu-0..7
    api, custom = _rules_api(fake_api)
    try:
        for g in range(6):
            rule = taint_rule_obj(f"maint-{g}", selector={"pool": "n1", "device": f"gpu-{g}"})
            made = cast(
                "dict[str, Any]", custom.create_cluster_custom_object(GROUP, VERSION, RULES, rule)
            )
            assert made["spec"]["taint"]["timeAdded"]  # the server's
        fake_api.put_object("resourceclaims", gpu_claim("three", 3))
        with running(fake_api) as rt:
            create_pod(core_v1, claim_pod("p", "three"))
            wait_for(lambda: scheduled_condition(fake_api, "p"), 5, "p marked unschedulable")
            rt.reporter.flush()
            condition = scheduled_condition(fake_api, "p")
            assert condition is not None
            assert "2 of 3 devices tolerate their taints" in condition["message"]
            assert node_of(fake_api, "p") is None
            custom.delete_cluster_custom_object(GROUP, VERSION, RULES, "maint-5")
            wait_for(lambda: node_of(fake_api, "p"), 5, "p bound once maint-5 is gone")
    finally:
        api.close()
    assert sorted(devices_of(fake_api, "three")) == ["gpu-5", "gpu-6", "gpu-7"]
    assert fake_api.requests_matching("GET", r"/apis/resource\.k8s\.io/v1/devicetaintrules")


def test_a_server_without_v1_device_taint_rules_is_served_without_reading_them(fake_api, core_v1):
    """1.34-1.36 serve resource.k8s.io/v1 but not its DeviceTaintRules (v1beta2 behind a gate,
    or none): claims are allocated, and no rule is asked for."""
    fake_api.registry.remove(GROUP, RULES)
    dra_cluster(fake_api)
    fake_api.put_object("resourceclaims", gpu_claim("two", 2))
    with running(fake_api):
        create_pod(core_v1, claim_pod("p", "two"))
        wait_for(lambda: node_of(fake_api, "p"), 5, "p bound")
    assert len(devices_of(fake_api, "two")) == 2
    assert fake_api.requests_matching("GET", r"/apis/resource\.k8s\.io/v1/devicetaintrules") == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["spec"]["taint"].update(effect="Evict"), "spec.taint.effect"),
        (lambda r: r["spec"]["taint"].update(key="bad key"), "spec.taint.key"),
        (lambda r: r["spec"]["taint"].pop("key"), "spec.taint.key: Required value"),
    ],
)
def test_the_fake_refuses_a_rule_a_real_server_refuses(fake_api, change, field):
    rule = taint_rule_obj("bad", selector={})
    change(rule)
    api, custom = _rules_api(fake_api)
    try:
        with pytest.raises(ApiException) as err:
            custom.create_cluster_custom_object(GROUP, VERSION, RULES, rule)
    finally:
        api.close()
    assert err.value.status == 422
    assert field in str(err.value.body)
