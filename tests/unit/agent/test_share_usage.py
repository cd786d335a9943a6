"""What shares use per GPU (NRT GPU zones, metrics): placed shares by their annotation and spec,
unplaced replicas as equal splits on the replica's GPU, only pods the kubelet lists."""

from __future__ import annotations

from agent.availability import ContainerGrant, DeviceGrant, PodGrant, compute_availability
from agent.metrics import AgentMetrics, MetricsSnapshot
from agent.numa_capacity import KubeletConfig, numa_capacity
from agent.share_usage import MIB, SharedGpu, share_figures, share_use, with_shares
from agent.shares import GPU_COMPUTE, GPU_MEMORY, GPUS_ANNOTATION, Sharing, encode_gpus
from tests.builders.pods import container, pod
from tests.builders.topology import dgx_h100, gpu_uuid

GPU = "nvidia.com/gpu"
INVENTORY = dgx_h100()
MEMORY = INVENTORY.gpus[0].memory_mib * MIB
SHARED = {
    gpu_uuid(i): SharedGpu(uuid=gpu_uuid(i), sharing=Sharing.MPS, replicas=4, resource=GPU)
    for i in (0, 1)
}


def placed(name: str, gpu: int, *, memory: str | None, compute: str | None = None) -> dict:
    limits = {GPU: "1", **({GPU_MEMORY: memory} if memory else {})}
    limits |= {GPU_COMPUTE: compute} if compute else {}
    body = pod(name, containers=[container("main", limits=limits)])
    body["metadata"]["annotations"] = {GPUS_ANNOTATION: encode_gpus({"main": gpu_uuid(gpu)})}
    return body


def listed(name: str, *replicas: str) -> PodGrant:
    devices = (DeviceGrant(resource_name=GPU, device_ids=replicas),) if replicas else ()
    return PodGrant(
        namespace="default", name=name, containers=(ContainerGrant(name="main", devices=devices),)
    )


def test_placed_shares_count_their_memory_and_compute_on_the_annotated_gpu() -> None:
    pods = [placed("a", 0, memory="10Gi", compute="30"), placed("b", 0, memory=None)]
    use = share_use(INVENTORY, SHARED, [listed("a", f"{gpu_uuid(1)}::0"), listed("b")], pods)
    assert set(use) == {gpu_uuid(0)}
    assert use[gpu_uuid(0)].memory_bytes == 10 * 1024**3 + MEMORY // 4
    assert use[gpu_uuid(0)].compute_percent == 30


def test_unlisted_and_finished_pods_do_not_count_and_unplaced_replicas_are_equal_splits() -> None:
    done = placed("done", 0, memory="10Gi") | {"status": {"phase": "Succeeded"}}
    pods = [placed("gone", 0, memory="10Gi"), done, pod("other")]
    grants = [listed("done"), listed("other", f"{gpu_uuid(1)}::2", f"{gpu_uuid(1)}::3")]
    use = share_use(INVENTORY, SHARED, grants, pods)
    assert {g: u.memory_bytes for g, u in use.items()} == {gpu_uuid(1): 2 * (MEMORY // 4)}
    assert [s.placed for s in use[gpu_uuid(1)].shares] == [False, False]


def test_shared_gpu_zones_carry_memory_compute_sharing_and_shares_and_the_metrics_show_them():
    capacity = numa_capacity(INVENTORY.numa_nodes, KubeletConfig())
    plain = compute_availability(INVENTORY, capacity, None)
    use = share_use(INVENTORY, SHARED, [listed("a")], [placed("a", 1, memory="8Gi", compute="25")])
    shared = with_shares(plain, INVENTORY, SHARED, use)
    gpu1 = shared.gpus[1]
    assert (gpu1.sharing, gpu1.shares) == (Sharing.MPS, 4)
    lines = {r.name: (r.capacity, r.allocatable, r.available) for r in gpu1.resources}
    assert lines[GPU_MEMORY] == (MEMORY, MEMORY, MEMORY - 8 * 1024**3)
    assert lines[GPU_COMPUTE] == (100, 100, 75)
    assert shared.gpus[2] == plain.gpus[2]
    assert shared.numa == plain.numa  # NUMA zones never list gpu-memory / gpu-compute
    metrics = AgentMetrics("t")
    metrics.update(MetricsSnapshot(inventory=INVENTORY, shares=share_figures(shared)))
    labels = {"gpu": "1", "uuid": gpu_uuid(1), "model": INVENTORY.gpus[1].product}
    sample = metrics.registry.get_sample_value
    assert sample("gputopo_agent_gpu_shares", labels) == 4
    assert sample("gputopo_agent_gpu_share_memory_bytes", labels) == 8 * 1024**3
    assert sample("gputopo_agent_gpu_shares", {**labels, "gpu": "2", "uuid": gpu_uuid(2)}) is None
