"""Per-GPU and per-NUMA availability from a PodResources snapshot."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.availability import (
    SOURCE_NONE,
    SOURCE_PODRESOURCES,
    ClaimDevice,
    ClaimGrant,
    ContainerGrant,
    DeviceGrant,
    MemoryGrant,
    PodGrant,
    PodResourcesSnapshot,
    allocated_devices,
    compute_availability,
)
from agent.dra.devices import dra_devices, nrt_devices
from agent.fingerprint import pods_fingerprint
from agent.numa_capacity import CPU, HUGEPAGES_2MI, MEMORY, KubeletConfig, numa_capacity
from agent.quantity import MIB
from agent.resource_names import GPU_RESOURCE
from tests.builders.topology import (
    allocatable_of,
    dgx_h100,
    gpu_pod,
    gpu_uuid,
    mig_mixed,
    mig_uuid,
    no_numa,
)


def counts(av, numa_id):
    return {r.name: (r.capacity, r.allocatable, r.available) for r in av.numa[numa_id].resources}


def gpu_counts(av, index):
    return {r.name: (r.capacity, r.allocatable, r.available) for r in av.gpus[index].resources}


def test_without_podresources_everything_is_free() -> None:
    inv = dgx_h100()
    av = compute_availability(inv, numa_capacity(inv.numa_nodes, KubeletConfig()), None)
    assert av.source == SOURCE_NONE
    assert av.fingerprint == ""
    assert counts(av, 0)[GPU_RESOURCE] == (4, 4, 4)
    assert gpu_counts(av, 5) == {GPU_RESOURCE: (1, 1, 1)}


def test_allocations_reduce_gpu_and_numa_available() -> None:
    inv = dgx_h100()
    snap = replace(
        allocatable_of(inv),
        pods=(gpu_pod("ml", "train-0", gpu_uuid(0), gpu_uuid(1)), gpu_pod("ml", "idle")),
    )
    av = compute_availability(inv, numa_capacity(inv.numa_nodes, KubeletConfig()), snap)
    assert av.source == SOURCE_PODRESOURCES
    assert counts(av, 0)[GPU_RESOURCE] == (4, 4, 2)
    assert counts(av, 1)[GPU_RESOURCE] == (4, 4, 4)
    assert [gpu_counts(av, i)[GPU_RESOURCE][2] for i in range(8)] == [0, 0, 1, 1, 1, 1, 1, 1]
    # with-exclusive-resources: the pod holding no device, CPU or memory is not counted
    assert av.fingerprint == pods_fingerprint([("ml", "train-0")])
    assert av.fingerprint_method == "with-exclusive-resources"
    assert allocated_devices(av)[0] == 1


def test_unhealthy_gpu_is_not_allocatable() -> None:
    inv = dgx_h100()
    av = compute_availability(
        inv, numa_capacity(inv.numa_nodes, KubeletConfig()), allocatable_of(inv), {gpu_uuid(7)}
    )
    assert gpu_counts(av, 7)[GPU_RESOURCE] == (1, 0, 0)
    assert not av.gpus[7].healthy
    assert counts(av, 1)[GPU_RESOURCE] == (4, 3, 3)


def test_mig_slices_per_profile() -> None:
    inv = mig_mixed()
    snap = replace(
        allocatable_of(inv),
        pods=(gpu_pod("a", "p", mig_uuid(0, 1), resource="nvidia.com/mig-1g.10gb"),),
    )
    av = compute_availability(inv, numa_capacity(inv.numa_nodes, KubeletConfig()), snap)
    assert gpu_counts(av, 0) == {
        "nvidia.com/mig-1g.10gb": (3, 3, 2),
        "nvidia.com/mig-3g.40gb": (1, 1, 1),
    }
    node = counts(av, 0)
    assert node["nvidia.com/mig-1g.10gb"] == (3, 3, 2)
    assert node[GPU_RESOURCE] == (1, 1, 1)
    assert [r.name for r in av.numa[0].resources][:5] == [
        "cpu",
        "memory",
        "hugepages-2Mi",
        "hugepages-1Gi",
        GPU_RESOURCE,
    ]


def test_time_slicing_replicas_count_on_their_gpu() -> None:
    inv = dgx_h100()
    replicas = tuple(f"{gpu_uuid(0)}::{n}" for n in range(4))
    snap = PodResourcesSnapshot(
        devices=(DeviceGrant(resource_name=GPU_RESOURCE, device_ids=replicas, numa_nodes=(0,)),),
        pods=(gpu_pod("a", "p", replicas[2]),),
    )
    av = compute_availability(inv, numa_capacity(inv.numa_nodes, KubeletConfig()), snap)
    assert gpu_counts(av, 0) == {GPU_RESOURCE: (4, 4, 3)}
    assert gpu_counts(av, 1) == {}


def test_exclusive_cpus_memory_and_foreign_devices() -> None:
    inv = dgx_h100()
    nic = DeviceGrant(resource_name="example.com/nic", device_ids=("nic0", "nic1"), numa_nodes=(1,))
    snap = PodResourcesSnapshot(
        devices=(*allocatable_of(inv).devices, nic),
        cpu_ids=tuple(range(2, 56)) + tuple(range(56, 112)),
        pods=(
            gpu_pod(
                "db",
                "pg",
                cpus=(2, 3, 60),
                memory=(
                    MemoryGrant(memory_type=HUGEPAGES_2MI, size=64 * 2 * MIB, numa_nodes=(0,)),
                ),
            ),
            gpu_pod("net", "router", "nic1", resource="example.com/nic"),
        ),
    )
    caps = numa_capacity(inv.numa_nodes, KubeletConfig())
    av = compute_availability(inv, caps, snap)
    assert counts(av, 0)[CPU] == (112_000, 54_000, 52_000)
    assert counts(av, 1)[CPU] == (112_000, 56_000, 55_000)
    assert counts(av, 0)[HUGEPAGES_2MI] == (1024 * MIB, 1024 * MIB, (512 - 64) * 2 * MIB)
    assert counts(av, 1)["example.com/nic"] == (2, 2, 1)
    assert "example.com/nic" not in counts(av, 0)
    assert counts(av, 0)[MEMORY][1] == caps[0].allocatable[MEMORY]


@pytest.mark.parametrize(
    ("numa_nodes", "affinity", "zone"),
    [
        pytest.param(1, (), 0, id="one NUMA node: the only node"),
        pytest.param(2, (), None, id="two NUMA nodes, nothing known: no zone"),
        pytest.param(2, (1,), 1, id="two NUMA nodes, NVML memory affinity names node 1"),
        pytest.param(2, (0, 1), None, id="memory affinity naming two nodes: no zone"),
    ],
)
def test_gpu_whose_sysfs_numa_node_is_minus_one(
    numa_nodes: int, affinity: tuple[int, ...], zone: int | None
) -> None:
    inv = no_numa(numa_nodes, affinity)
    av = compute_availability(inv, numa_capacity(inv.numa_nodes, KubeletConfig()), None)
    assert gpu_counts(av, 0) == {GPU_RESOURCE: (1, 1, 1)}
    listed = {n: counts(av, n).get(GPU_RESOURCE) for n in range(numa_nodes)}
    assert listed == {n: (1, 1, 1) if n == zone else None for n in range(numa_nodes)}


def _dra(inventory, gpus, pool="node-a"):
    """The DRA driver's devices of `gpus` (whole GPUs and MIG devices) as the NRT counts them."""
    return nrt_devices(pool, dra_devices(inventory, gpus))


def _claim_pod(name, *devices, driver="gpu.gputopo.io", pool="node-a"):
    claim = ClaimGrant(
        claim_namespace="ml",
        claim_name=f"{name}-gpu",
        devices=tuple(ClaimDevice(driver=driver, pool=pool, device=d) for d in devices),
    )
    return PodGrant(
        namespace="ml", name=name, containers=(ContainerGrant(name="main", claims=(claim,)),)
    )


def _without(snapshot, inventory, gpus):
    uuids = {str(inventory.gpus[i].uuid) for i in gpus}
    uuids |= {str(m.uuid) for g, m in inventory.mig_devices() if g.index in gpus}
    devices = tuple(d for d in snapshot.devices if not set(d.device_ids) & uuids)
    return replace(snapshot, devices=devices)


def test_gpus_prepared_for_dra_claims_count_as_used() -> None:
    inv = dgx_h100()
    dynamic = _dra(inv, {6, 7})
    snap = replace(
        _without(allocatable_of(inv), inv, {6, 7}),
        pods=(
            _claim_pod("train", dynamic[0].name),
            _claim_pod("other-pool", dynamic[1].name, pool="node-b"),
            _claim_pod("other-driver", dynamic[1].name, driver="gpu.nvidia.com"),
        ),
    )
    av = compute_availability(
        inv, numa_capacity(inv.numa_nodes, KubeletConfig()), snap, dynamic=dynamic
    )
    assert gpu_counts(av, 6) == {"gpu.gputopo.io/gpu": (1, 1, 0)}
    assert gpu_counts(av, 7) == {"gpu.gputopo.io/gpu": (1, 1, 1)}
    assert gpu_counts(av, 5) == {GPU_RESOURCE: (1, 1, 1)}
    assert counts(av, 1)["gpu.gputopo.io/gpu"] == (2, 2, 1)
    assert counts(av, 1)[GPU_RESOURCE] == (2, 2, 2)
    # a pod holding only DRA devices stays out of the fingerprint (the scheduler's side counts
    # pods by their requests)
    assert av.fingerprint == pods_fingerprint([])


def test_dra_mig_devices_and_health_without_podresources() -> None:
    inv = mig_mixed()
    dynamic = _dra(inv, {0, 1})
    av = compute_availability(
        inv,
        numa_capacity(inv.numa_nodes, KubeletConfig()),
        None,
        unhealthy=frozenset({str(mig_uuid(0, 1))}),
        dynamic=dynamic,
    )
    assert gpu_counts(av, 0) == {
        "gpu.gputopo.io/mig-1g.10gb": (3, 2, 2),
        "gpu.gputopo.io/mig-3g.40gb": (1, 1, 1),
    }
    assert gpu_counts(av, 1) == {"gpu.gputopo.io/gpu": (1, 1, 1)}  # not nvidia.com/gpu too


def test_a_claimed_mig_device_is_used_on_its_gpu() -> None:
    inv = mig_mixed()
    dynamic = _dra(inv, {0})
    held = next(d for d in dynamic if "3g" in d.name)
    snap = replace(_without(allocatable_of(inv), inv, {0}), pods=(_claim_pod("p", held.name),))
    av = compute_availability(
        inv, numa_capacity(inv.numa_nodes, KubeletConfig()), snap, dynamic=dynamic
    )
    assert gpu_counts(av, 0)["gpu.gputopo.io/mig-3g.40gb"] == (1, 1, 0)
    assert gpu_counts(av, 0)["gpu.gputopo.io/mig-1g.10gb"] == (3, 3, 3)
    assert gpu_counts(av, 1) == {GPU_RESOURCE: (1, 1, 1)}
