"""Advertised resources per fixture and strategy (pure: inventory + settings -> resources)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from agent.inventory import load_inventory
from agent.model import NodeInventory
from deviceplugin.errors import ResourceError
from deviceplugin.resources import build_resources
from deviceplugin.settings import MigStrategy, SharedResource, TimeSlicing
from tests.builders.deviceplugin import make_inventory, settings


def counts(inventory: NodeInventory, **overrides: Any) -> dict[str, int]:
    return {r.name: len(r.devices) for r in build_resources(inventory, settings(**overrides))}


@pytest.mark.parametrize(
    ("fixture", "strategy", "expected"),
    [
        pytest.param(
            "dgx-a100-mig",
            MigStrategy.MIXED,
            {
                "nvidia.com/gpu": 4,
                "nvidia.com/mig-1g.10gb": 8,
                "nvidia.com/mig-2g.20gb": 1,
                "nvidia.com/mig-3g.40gb": 4,
                "nvidia.com/mig-4g.40gb": 1,
            },
            id="dgx-a100-mig mixed: 4 whole GPUs + every MIG profile",
        ),
        pytest.param(
            "dgx-a100-mig", MigStrategy.NONE, {"nvidia.com/gpu": 8}, id="dgx-a100-mig none"
        ),
        pytest.param("dgx-a100", MigStrategy.MIXED, {"nvidia.com/gpu": 8}, id="dgx-a100 mixed"),
        pytest.param("dgx-a100", MigStrategy.SINGLE, {"nvidia.com/gpu": 8}, id="no MIG: single"),
        pytest.param("dgx-2", MigStrategy.MIXED, {"nvidia.com/gpu": 16}, id="dgx-2 16 GPUs"),
        pytest.param("single-t4", MigStrategy.MIXED, {"nvidia.com/gpu": 1}, id="single T4"),
    ],
)
def test_advertised_counts_per_fixture_and_strategy(fixture, strategy, expected):
    assert counts(load_inventory(fixture), mig_strategy=strategy) == expected


def test_ids_are_uuids_and_numa_comes_from_the_gpu():
    inventory = load_inventory("dgx-a100-mig")
    resources = {r.name: r for r in build_resources(inventory, settings())}
    gpus = resources["nvidia.com/gpu"].devices
    assert [d.id for d in gpus] == [g.uuid for g in inventory.gpus[4:]]
    assert [d.numa_node for d in gpus] == [g.numa_node for g in inventory.gpus[4:]]
    mig_ids = {d.id for r in resources.values() for d in r.devices if d.mig is not None}
    assert mig_ids == {m.uuid for _, m in inventory.mig_devices()}
    one_g = resources["nvidia.com/mig-1g.10gb"].devices
    assert {d.numa_node for d in one_g} == {inventory.gpus[0].numa_node}


def test_single_rejects_a_mixed_layout_naming_gpus_and_profiles():
    with pytest.raises(ResourceError) as info:
        build_resources(load_inventory("dgx-a100-mig"), settings(mig_strategy=MigStrategy.SINGLE))
    message = str(info.value)
    assert "MIG enabled on GPUs 0,1,2,3, not on GPUs 4,5,6,7" in message
    assert "1g.10gb on GPUs 0,1" in message
    assert "4g.40gb on GPUs 2" in message


def test_single_with_one_profile_advertises_mig_devices_as_gpu():
    inventory = make_inventory(4, mig={i: ["3g.40gb", "3g.40gb"] for i in range(4)})
    resources = build_resources(inventory, settings(mig_strategy=MigStrategy.SINGLE))
    assert [r.name for r in resources] == ["nvidia.com/gpu"]
    assert {d.id for d in resources[0].devices} == {m.uuid for _, m in inventory.mig_devices()}


def test_single_rejects_a_mig_gpu_without_devices():
    inventory = make_inventory(2, mig={0: ["1g.10gb"], 1: []})
    with pytest.raises(ResourceError, match=r"MIG-enabled GPUs 1 have no MIG devices"):
        build_resources(inventory, settings(mig_strategy=MigStrategy.SINGLE))


def test_mixed_turns_plus_into_dot_and_skips_empty_mig_gpus():
    inventory = make_inventory(3, mig={0: ["1g.10gb+me", "1g.10gb"], 1: []})
    assert counts(inventory) == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.10gb": 1,
        "nvidia.com/mig-1g.10gb.me": 1,
    }


def test_numa_none_is_kept_as_none():
    inventory = make_inventory(2, numa_of=[None, 1])
    (resource,) = build_resources(inventory, settings())
    assert [d.numa_node for d in resource.devices] == [None, 1]


def test_the_vm_h200_gets_no_topology_info_although_the_nrt_places_it_under_node_0():
    inventory = load_inventory("vm-h200")
    (resource,) = build_resources(inventory, settings())
    assert [d.numa_node for d in resource.devices] == [None]  # as NVIDIA's plugin: -1, omitted
    assert inventory.gpu_numa_zone(inventory.gpus[0]) == 0


def sharing(*entries: SharedResource, rename: bool = False, fail: bool = False) -> TimeSlicing:
    return TimeSlicing(
        rename_by_default=rename, fail_requests_greater_than_one=fail, resources=entries
    )


def test_time_slicing_replicas_keep_the_name_by_default():
    inventory = make_inventory(2)
    ts = sharing(SharedResource(name="nvidia.com/gpu", replicas=3))
    (resource,) = build_resources(inventory, settings(time_slicing=ts))
    assert resource.name == "nvidia.com/gpu"
    assert resource.shared
    assert [d.id for d in resource.devices[:3]] == [
        f"{inventory.gpus[0].uuid}::{n}" for n in range(3)
    ]
    assert Counter(d.gpu_index for d in resource.devices) == {0: 3, 1: 3}


def test_time_slicing_rename_by_default_and_partial_devices():
    inventory = make_inventory(3)
    ts = sharing(
        SharedResource(name="nvidia.com/gpu", replicas=2, devices=("0", inventory.gpus[2].uuid)),
        rename=True,
        fail=True,
    )
    resources = {r.name: r for r in build_resources(inventory, settings(time_slicing=ts))}
    assert set(resources) == {"nvidia.com/gpu", "nvidia.com/gpu.shared"}
    assert [d.id for d in resources["nvidia.com/gpu"].devices] == [inventory.gpus[1].uuid]
    shared = resources["nvidia.com/gpu.shared"]
    assert shared.fail_requests_greater_than_one
    assert sorted({d.gpu_index for d in shared.devices}) == [0, 2]


def test_time_slicing_of_a_mig_profile_and_an_absent_resource():
    inventory = make_inventory(2, mig={0: ["1g.10gb", "1g.10gb"]})
    ts = sharing(
        SharedResource(name="nvidia.com/mig-1g.10gb", replicas=2, rename="mig-small"),
        SharedResource(name="nvidia.com/mig-7g.80gb", replicas=2),
    )
    assert counts(inventory, time_slicing=ts) == {"nvidia.com/gpu": 1, "nvidia.com/mig-small": 4}


def test_socket_names_use_the_resource_tail():
    inventory = make_inventory(2, mig={0: ["1g.10gb"]})
    names = [r.socket_name for r in build_resources(inventory, settings())]
    assert names == ["gputopo-gpu.sock", "gputopo-mig-1g.10gb.sock"]
