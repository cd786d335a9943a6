"""daemonset/optional/dra/: the DRA driver's component, and beside it the opt-in DeviceClass that
maps the extended resource nvidia.com/gpu to the driver's whole GPUs (KEP-5004)."""

from __future__ import annotations

import pytest

from tests.builders import render as r

DRA = r.OPTIONAL / "dra"
EXTENDED = DRA / "extended-resource"


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = r.kubectl_path()
    if path is None:
        pytest.skip("kubectl is not installed: components cannot be rendered")
    return str(path)


def _classes(objects: list[r.Obj]) -> dict[str, r.Obj]:
    return {o["metadata"]["name"]: o for o in r.by_kind(objects, "DeviceClass")}


def test_the_dra_component_maps_no_extended_resource(kubectl):
    classes = _classes(r.render_with_components(DRA))
    assert sorted(classes) == ["gpu-share.gputopo.io", "gpu.gputopo.io", "mig.gputopo.io"]
    assert all("extendedResourceName" not in c["spec"] for c in classes.values())


def test_the_extended_resource_part_maps_nvidia_gpu_to_whole_unshared_gpus(kubectl):
    classes = _classes(r.render_with_components(DRA, EXTENDED))
    extended = classes.pop("gpu-extended.gputopo.io")
    assert extended["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    # the devices of gpu.gputopo.io: a pod asking one nvidia.com/gpu gets one whole GPU
    assert extended["spec"]["selectors"] == classes["gpu.gputopo.io"]["spec"]["selectors"]
    assert [c for c in classes.values() if "extendedResourceName" in c["spec"]] == []


def test_its_comment_says_not_beside_the_device_plugins_nvidia_gpu():
    text = (EXTENDED / "deviceclass.yaml").read_text(encoding="utf-8")
    assert "Do not use it on nodes where the device plugin also serves nvidia.com/gpu" in text
    assert "DRAExtendedResource" in text
