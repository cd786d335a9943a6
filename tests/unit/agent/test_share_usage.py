"""What shares use per GPU (NRT GPU zones, metrics): what the agent's record says each share
container was given, matched with the replica IDs the kubelet lists; listed replicas without a
record as equal splits on the replica's GPU; never the pod's annotations or spec."""

from __future__ import annotations

from dataclasses import replace

from agent.availability import ContainerGrant, DeviceGrant, PodGrant, compute_availability
from agent.metrics import AgentMetrics, MetricsSnapshot
from agent.numa_capacity import KubeletConfig, numa_capacity
from agent.share_record import GivenShare
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


def annotated(name: str, gpu: int, *, memory: str | None, compute: str | None = None) -> dict:
    """A pod whose spec and `gputopo.io/gpus` say what it would like (its author wrote both)."""
    limits = {GPU: "1", **({GPU_MEMORY: memory} if memory else {})}
    limits |= {GPU_COMPUTE: compute} if compute else {}
    body = pod(name, containers=[container("main", limits=limits)])
    body["metadata"]["uid"] = f"uid-{name}"
    body["metadata"]["annotations"] = {GPUS_ANNOTATION: encode_gpus({"main": gpu_uuid(gpu)})}
    return body


def given(name: str, gpu: int, replica: str, *, memory: int | None, compute: int | None = None):
    return GivenShare(
        pod=f"default/{name}", uid=f"uid-{name}", container="main", init=False, resource=GPU,
        ids=(replica,), gpu=gpu_uuid(gpu), memory_bytes=memory, compute_percent=compute,
    )  # fmt: skip


def listed(name: str, *replicas: str) -> PodGrant:
    devices = (DeviceGrant(resource_name=GPU, device_ids=replicas),) if replicas else ()
    return PodGrant(
        namespace="default", name=name, containers=(ContainerGrant(name="main", devices=devices),)
    )


def test_recorded_shares_count_what_they_were_given_on_their_gpu_whatever_the_pod_says() -> None:
    a_replica, b_replica = f"{gpu_uuid(1)}::0", f"{gpu_uuid(0)}::1"
    pods = [annotated("a", 1, memory="1Gi"), annotated("b", 1, memory="70Gi", compute="90")]
    record = [
        given("a", 0, a_replica, memory=10 * 1024**3, compute=30),
        given("b", 0, b_replica, memory=None),
    ]
    grants = [listed("a", a_replica), listed("b", b_replica)]
    use = share_use(INVENTORY, SHARED, grants, pods, record)
    assert set(use) == {gpu_uuid(0)}
    assert use[gpu_uuid(0)].memory_bytes == 10 * 1024**3 + MEMORY // 4
    assert use[gpu_uuid(0)].compute_percent == 30


def test_a_forged_annotation_without_a_record_counts_an_equal_split_on_the_replicas_gpu() -> None:
    forged = annotated("forged", 0, memory="1Gi")
    use = share_use(INVENTORY, SHARED, [listed("forged", f"{gpu_uuid(1)}::3")], [forged])
    assert {g: u.memory_bytes for g, u in use.items()} == {gpu_uuid(1): MEMORY // 4}


def test_unlisted_and_finished_pods_do_not_count_and_unplaced_replicas_are_equal_splits() -> None:
    done = annotated("done", 0, memory="10Gi") | {"status": {"phase": "Succeeded"}}
    pods = [annotated("gone", 0, memory="10Gi"), done, pod("other")]
    record = [given("gone", 0, f"{gpu_uuid(0)}::0", memory=10 * 1024**3)]
    record.append(given("done", 0, f"{gpu_uuid(0)}::1", memory=10 * 1024**3))
    grants = [
        listed("done", f"{gpu_uuid(0)}::1"),
        listed("other", f"{gpu_uuid(1)}::2", f"{gpu_uuid(1)}::3"),
    ]
    use = share_use(INVENTORY, SHARED, grants, pods, record)
    assert {g: u.memory_bytes for g, u in use.items()} == {gpu_uuid(1): 2 * (MEMORY // 4)}
    assert [s.placed for s in use[gpu_uuid(1)].shares] == [False, False]


def test_shared_gpu_zones_carry_memory_compute_sharing_and_shares_and_the_metrics_show_them():
    capacity = numa_capacity(INVENTORY.numa_nodes, KubeletConfig())
    plain = compute_availability(INVENTORY, capacity, None)
    record = [given("a", 1, f"{gpu_uuid(1)}::0", memory=8 * 1024**3, compute=25)]
    use = share_use(INVENTORY, SHARED, [listed("a", f"{gpu_uuid(1)}::0")], [], record)
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


def test_a_shared_gpus_memory_is_nvmls_total_less_its_reserved_memory():
    gpus = (replace(INVENTORY.gpus[0], memory_reserved_mib=559), *INVENTORY.gpus[1:])
    inventory = replace(INVENTORY, gpus=gpus)
    capacity = numa_capacity(inventory.numa_nodes, KubeletConfig())
    plain = compute_availability(inventory, capacity, None)
    shared = with_shares(plain, inventory, SHARED, {})
    lines = {r.name: r for r in shared.gpus[0].resources}
    usable = (INVENTORY.gpus[0].memory_mib - 559) * MIB
    assert (lines[GPU_MEMORY].capacity, lines[GPU_MEMORY].allocatable) == (usable, usable)
