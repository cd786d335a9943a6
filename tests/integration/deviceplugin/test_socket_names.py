"""Two resources with the same tail (`rename: example.com/gpu` beside `nvidia.com/gpu`)."""

from __future__ import annotations

import threading

from deviceplugin.settings import SharedResource, TimeSlicing
from tests.builders.kubelet import running_node

RENAMED = TimeSlicing(
    resources=(
        SharedResource(name="nvidia.com/gpu", replicas=2, devices=4, rename="example.com/gpu"),
    )
)


def test_resources_with_the_same_tail_get_their_own_socket_and_devices():
    with running_node("dgx-a100", time_slicing=RENAMED) as node:
        counts = {name: len(devices) for name, devices in node.kubelet.resources().items()}
        endpoints = {r.resource_name: r.endpoint for r in node.kubelet.registrations}
        registered = len(node.kubelet.registrations)
        threading.Event().wait(1.5)  # 15 passes of the loop: time to notice a stolen socket
        settled = len(node.kubelet.registrations)
        sockets = sorted(p.name for p in node.kubelet.plugin_dir.iterdir())
    assert counts == {"nvidia.com/gpu": 4, "example.com/gpu": 8}
    assert endpoints == {
        "nvidia.com/gpu": "gputopo-gpu.sock",
        "example.com/gpu": "gputopo-example.com_gpu.sock",
    }
    assert (registered, settled) == (2, 2)  # before: they deleted each other's socket
    assert set(endpoints.values()) <= set(sockets)
