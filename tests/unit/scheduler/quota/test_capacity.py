"""The root's capacity from nodes (`nodes_capacity`): each shared GPU is one GPU, whether the
kubelet counts its replicas as `nvidia.com/gpu` (plain time-slicing) or not at all (renamed)."""

from __future__ import annotations

from dataclasses import replace

from agent.resource_names import GPU_RESOURCE
from agent.shares import SHARED_GPU_RESOURCE
from scheduler.quota.capacity import nodes_capacity, shared_gpu_fix
from scheduler.quota.models import model_key, model_of_product
from tests.builders.placement import H100, make_node, shared_node


def test_a_shared_gpu_counts_once_however_the_kubelet_counts_its_replicas() -> None:
    sliced = shared_node("sliced", shared=4, slots=4, resource=GPU_RESOURCE)
    renamed = shared_node("renamed", shared=2, whole=2)
    plain = make_node("plain", gpus=8, labels={"nvidia.com/gpu.product": "Tesla-T4"})
    assert sliced.allocatable[GPU_RESOURCE] == 16  # what the kubelet advertises: the replicas
    assert renamed.allocatable[GPU_RESOURCE] == 2  # the shared two under another name
    capacity = nodes_capacity([sliced, renamed, plain])
    assert capacity[GPU_RESOURCE] == (4 + 4 + 8) * 1000
    assert capacity[model_key(GPU_RESOURCE, model_of_product(H100))] == (4 + 4) * 1000
    assert SHARED_GPU_RESOURCE not in capacity  # a replica resource is never a quota resource
    assert capacity["cpu"] == sum(n.allocatable["cpu"] for n in (sliced, renamed, plain))


def test_a_node_with_whole_and_time_sliced_gpus_counts_each_gpu_once() -> None:
    node = shared_node("mixed", shared=2, whole=6, slots=4, resource=GPU_RESOURCE)
    node = replace(node, allocatable={**node.allocatable, GPU_RESOURCE: 2 * 4 + 6})
    assert shared_gpu_fix(node) == {GPU_RESOURCE: (2 - 8) * 1000}
    assert nodes_capacity([node])[GPU_RESOURCE] == 8 * 1000
    assert shared_gpu_fix(make_node("plain")) == {}
