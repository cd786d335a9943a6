"""IMEX channel 0 reaches the container through real gRPC Allocate on a GB200 node."""

from __future__ import annotations

from pathlib import Path

from deviceplugin.imex import CHANNEL_DIR
from deviceplugin.settings import DeviceListStrategy, Imex
from tests.builders.kubelet import running_node

CHANNEL0 = f"{CHANNEL_DIR}/channel0"


def test_allocate_injects_the_imex_channel_for_every_strategy(tmp_path: Path) -> None:
    folder = tmp_path / CHANNEL_DIR.lstrip("/")
    folder.mkdir(parents=True)
    (folder / "channel0").symlink_to("/dev/null")  # a character device, like the real node
    strategies = (DeviceListStrategy.ENVVAR, DeviceListStrategy.VOLUME_MOUNTS)
    with running_node(
        "gb200-nvl72-node",
        imex=Imex(channel_ids=(0,), dev_root=tmp_path),
        device_list_strategies=strategies,
        pass_device_specs=True,
    ) as node:
        _, response = node.kubelet.admit("nvidia.com/gpu", 4)
    assert response.envs["NVIDIA_IMEX_CHANNELS"] == "0"
    mounts = {m.container_path: m.host_path for m in response.mounts}
    assert mounts["/var/run/nvidia-container-devices/imex/0"] == "/dev/null"
    devices = {d.container_path: (d.host_path, d.permissions) for d in response.devices}
    assert devices[CHANNEL0] == (CHANNEL0, "rw")


def test_without_the_channel_on_the_node_allocate_adds_nothing(tmp_path: Path) -> None:
    with running_node("gb200-nvl72-node", imex=Imex(channel_ids=(0,), dev_root=tmp_path)) as node:
        _, response = node.kubelet.admit("nvidia.com/gpu", 1)
    assert "NVIDIA_IMEX_CHANNELS" not in response.envs
    assert set(response.envs) == {"NVIDIA_VISIBLE_DEVICES"}
