"""Node preferences end to end, through the real client against the fake API server: a pod's
preferred node affinity takes it to the zone it prefers over the node binpacking would choose,
and there a node's `PreferNoSchedule` taint keeps it off that node for the other one."""

from __future__ import annotations

from tests.builders.scheduler import create_pod, gpu_node, node_of, pod_body, running, wait_for

ZONE = "topology.kubernetes.io/zone"


def test_preferred_zone_and_soft_taints_rank_nodes(fake_api, core_v1):
    gpu_node(fake_api, "a1", labels={ZONE: "a"})
    gpu_node(fake_api, "b1", labels={ZONE: "b"})
    gpu_node(fake_api, "b2", labels={ZONE: "b"})
    node = fake_api.get_object("nodes", "b1")
    node["spec"]["taints"] = [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]
    fake_api.put_object("nodes", node)
    prefers_b = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 80,
                    "preference": {
                        "matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b"]}]
                    },
                }
            ]
        }
    }
    with running(fake_api):
        create_pod(core_v1, pod_body("first", gpus=4))  # binpacking: a1, the lowest name
        assert wait_for(lambda: node_of(fake_api, "first"), 10, "first bound") == "a1"
        create_pod(core_v1, pod_body("zoned", gpus=1, affinity=prefers_b))
        assert wait_for(lambda: node_of(fake_api, "zoned"), 10, "zoned bound") == "b2"
