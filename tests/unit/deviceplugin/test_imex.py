"""IMEX channels: NVIDIA's `imex` config section, the channel check and what Allocate adds."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from agent.cli.config import load
from agent.errors import ConfigError
from deviceplugin.allocation import ContainerAllocation, DeviceNode, MountSpec
from deviceplugin.errors import PluginError
from deviceplugin.imex import CHANNEL_DIR, ImexChannel, resolve_channels, with_channels
from deviceplugin.settings import DeviceListStrategy, Imex

ENV = {"NODE_NAME": "node-a"}
CHANNEL0 = f"{CHANNEL_DIR}/channel0"
BASE = ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": "GPU-a"})


def config_with(tmp_path: Path, imex: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\n" + textwrap.dedent(imex), encoding="utf-8")
    return path


def host_with_channel(root: Path, target: Path = Path("/dev/null")) -> Path:
    """A host root whose channel 0 resolves to `target` (/dev/null is a character device)."""
    folder = root / CHANNEL_DIR.lstrip("/")
    folder.mkdir(parents=True)
    (folder / "channel0").symlink_to(target)
    return root


def test_nvidia_imex_section_is_honoured_with_the_host_root(tmp_path: Path) -> None:
    path = config_with(tmp_path, "imex:\n  channelIDs: [0]\n  required: true\n")
    cfg = load(["--config", str(path), "--host-root", "/host"], ENV)
    assert cfg.plugin.imex == Imex(channel_ids=(0,), required=True, dev_root=Path("/host"))


def test_without_an_imex_section_no_channel_is_configured(tmp_path: Path) -> None:
    cfg = load(["--config", str(config_with(tmp_path, "imex: {}\n"))], ENV)
    assert cfg.plugin.imex.channel_ids == ()
    assert load([], ENV).plugin.imex == Imex()


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("imex: {channelIDs: [1]}", "imex.channelIDs: must be [] or [0] (as NVIDIA's plugin "
         "allows), got [1]"),
        ("imex: {channelIDs: [0, 1]}", "imex.channelIDs: must be [] or [0]"),
        ("imex: {channelIDs: [false]}", "imex.channelIDs: must be [] or [0]"),
        ("imex: {required: maybe}", "imex.required: expected true or false, got 'maybe'"),
        ("imex: {defaultChannel: 0}", "imex.defaultChannel: unknown key"),
        ("imex: [0]", "imex: expected a mapping with channelIDs and required"),
    ],
)  # fmt: skip
def test_bad_imex_section_is_one_config_error(tmp_path: Path, section: str, problem: str) -> None:
    path = config_with(tmp_path, section + "\n")
    with pytest.raises(ConfigError) as raised:
        load(["--config", str(path)], ENV)
    assert f"{path}: {problem}" in str(raised.value)


def test_a_channel_under_the_host_root_is_resolved(tmp_path: Path) -> None:
    root = host_with_channel(tmp_path)
    assert resolve_channels(Imex(channel_ids=(0,), dev_root=root)) == (ImexChannel(id=0),)
    assert ImexChannel(id=0).path == "/dev/nvidia-caps-imex-channels/channel0"


def test_a_missing_channel_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="deviceplugin.imex"):
        assert resolve_channels(Imex(channel_ids=(0,), dev_root=tmp_path)) == ()
    assert caplog.messages == [
        f"IMEX channel {CHANNEL0} not found at {tmp_path}{CHANNEL0} or {CHANNEL0}; not injected"
    ]


def test_a_regular_file_is_not_a_channel(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    root = host_with_channel(tmp_path / "host", plain)
    assert resolve_channels(Imex(channel_ids=(0,), dev_root=root)) == ()


def test_a_missing_required_channel_fails_the_plugin(tmp_path: Path) -> None:
    with pytest.raises(PluginError) as raised:
        resolve_channels(Imex(channel_ids=(0,), required=True, dev_root=tmp_path))
    assert str(raised.value) == (
        f"imex.required: IMEX channel {CHANNEL0} does not exist "
        f"({tmp_path}{CHANNEL0} or {CHANNEL0})"
    )


@pytest.mark.parametrize(
    ("strategies", "pass_specs", "envs", "mounts", "nodes"),
    [
        pytest.param(
            {DeviceListStrategy.ENVVAR}, False, {"NVIDIA_IMEX_CHANNELS": "0"}, (), (), id="envvar"
        ),
        pytest.param(
            {DeviceListStrategy.VOLUME_MOUNTS},
            False,
            {},
            (MountSpec(container_path="/var/run/nvidia-container-devices/imex/0",
                       host_path="/dev/null"),),
            (),
            id="volume-mounts",
        ),
        pytest.param(
            {DeviceListStrategy.CDI_CRI},
            True,
            {},
            (),
            (DeviceNode(container_path=CHANNEL0, host_path=CHANNEL0),),
            id="cdi-cri with device specs",
        ),
        pytest.param({DeviceListStrategy.CDI_CRI}, False, {}, (), (), id="cdi-cri alone"),
    ],
)  # fmt: skip
def test_channels_are_added_per_device_list_strategy(
    strategies: set[DeviceListStrategy],
    pass_specs: bool,
    envs: dict[str, str],
    mounts: tuple[MountSpec, ...],
    nodes: tuple[DeviceNode, ...],
) -> None:
    got = with_channels(BASE, (ImexChannel(id=0),), strategies, pass_device_specs=pass_specs)
    assert dict(got.envs) == {**BASE.envs, **envs}
    assert got.mounts == mounts
    assert got.device_nodes == nodes


def test_no_channel_leaves_the_allocation_alone() -> None:
    strategies = set(DeviceListStrategy)
    assert with_channels(BASE, (), strategies, pass_device_specs=True) is BASE
