"""At the replica bound the whole device list still reaches the kubelet in one gRPC message."""

from __future__ import annotations

from deviceplugin.settings import MAX_REPLICAS, SharedResource, TimeSlicing
from tests.builders.kubelet import running_node


def test_max_replicas_of_every_gpu_reach_the_kubelet():
    sharing = TimeSlicing(resources=(SharedResource(name="nvidia.com/gpu", replicas=MAX_REPLICAS),))
    with running_node("dgx-a100", time_slicing=sharing) as node:
        devices = node.kubelet.devices("nvidia.com/gpu")
        assert len(devices) == 8 * MAX_REPLICAS
        assert f"{node.uuid(7)}::{MAX_REPLICAS - 1}" in devices
