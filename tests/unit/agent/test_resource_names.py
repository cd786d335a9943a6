"""`agent/resource_names.py`: NVIDIA's MIG resource names and the profiles in them, both ways."""

from __future__ import annotations

import pytest

from agent.dra import DRIVER
from agent.resource_names import (
    DRA_DRIVER,
    DRA_GPU_RESOURCE,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    dra_mig_resource,
    is_dra_resource,
    mig_profile,
    mig_resource,
)


@pytest.mark.parametrize(
    ("profile", "resource"),
    [
        pytest.param("1g.10gb", "nvidia.com/mig-1g.10gb", id="plain"),
        pytest.param("3g.40gb", "nvidia.com/mig-3g.40gb", id="3g"),
        pytest.param("1g.10gb+me", "nvidia.com/mig-1g.10gb.me", id="media extensions"),
        pytest.param("1g.12gb-me", "nvidia.com/mig-1g.12gb-me", id="a dash is kept"),
    ],
)
def test_profile_and_resource_name_round_trip(profile: str, resource: str) -> None:
    assert mig_resource(profile) == resource
    assert mig_profile(resource) == profile


@pytest.mark.parametrize(
    "resource", [GPU_RESOURCE, "cpu", "hugepages-2Mi", "example.com/mig-1g.10gb"]
)
def test_names_that_are_not_mig_devices(resource: str) -> None:
    assert mig_profile(resource) is None


def test_the_prefix_is_nvidias() -> None:
    assert mig_resource("7g.80gb").startswith(MIG_RESOURCE_PREFIX)
    assert (GPU_RESOURCE, MIG_RESOURCE_PREFIX) == ("nvidia.com/gpu", "nvidia.com/mig-")


def test_dra_resource_lines_are_in_the_dra_drivers_domain():
    assert DRA_DRIVER == DRIVER
    assert DRA_GPU_RESOURCE == "gpu.gputopo.io/gpu"
    assert dra_mig_resource("1g.10gb+me") == "gpu.gputopo.io/mig-1g.10gb.me"
    assert is_dra_resource(dra_mig_resource("3g.40gb"))
    assert not is_dra_resource(mig_resource("3g.40gb"))
    assert not is_dra_resource("nvidia.com/gpu")
