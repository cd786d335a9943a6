"""`--dra-gpus` / `dra.gpus`: which GPUs the DRA driver serves instead of the device plugin."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest

from agent.cli.config import load
from agent.cli.dra_config import dra_gpu_indices
from agent.cli.dra_service import dra_mps_edits, shared_dra_gpus
from agent.errors import ConfigError
from agent.mps.shared_gpus import ALL, select_gpus
from agent.resource_names import GPU_RESOURCE
from agent.shares import Sharing
from deviceplugin.dra.mps_edits import MpsEdits
from deviceplugin.resources import build_resources
from deviceplugin.settings import PluginSettings, SharedResource, TimeSlicing
from tests.builders.deviceplugin import make_inventory

ENV = {"NODE_NAME": "node-a"}


def test_default_is_no_gpu_on_dra():
    cfg = load([], ENV)
    assert not cfg.dra.enabled
    assert str(cfg.dra.registry_dir) == "/var/lib/kubelet/plugins_registry"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("gpus: all", frozenset(range(4)), id="all"),
        pytest.param("gpus: none", frozenset(), id="none"),
        pytest.param("gpus: [1, 3]", frozenset({1, 3}), id="list of indices"),
        pytest.param("gpus: GPU-00000000-0000-4000-8000-000000000002", frozenset({2}), id="a UUID"),
    ],
)
def test_the_config_file_dra_section(tmp_path, text, want):
    path = tmp_path / "agent.yaml"
    path.write_text(textwrap.dedent(f"version: v1\ndra:\n  {text}\n"))
    cfg = load(["--config", str(path)], ENV)
    assert dra_gpu_indices(cfg.dra, make_inventory(4)) == want


def test_the_flag_wins_over_the_file(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("version: v1\ndra:\n  gpus: all\n")
    cfg = load(["--config", str(path), "--dra-gpus", "0"], ENV)
    assert dra_gpu_indices(cfg.dra, make_inventory(4)) == {0}


@pytest.mark.parametrize(
    ("argv", "doc", "message"),
    [
        pytest.param(["--dra-gpus", "all,3"], None, "'all' cannot be combined", id="all and more"),
        pytest.param([], "dra:\n  gpu: all\n", "dra.gpu: unknown key", id="misspelt key"),
        pytest.param([], "dra: all\n", "dra: expected a mapping", id="not a mapping"),
    ],
)
def test_bad_dra_settings_are_named(tmp_path, argv, doc, message):
    if doc is not None:
        path = tmp_path / "agent.yaml"
        path.write_text("version: v1\n" + doc)
        argv = [*argv, "--config", str(path)]
    with pytest.raises(ConfigError, match=message):
        load(argv, ENV)


def test_an_unknown_gpu_is_refused_naming_it():
    cfg = load(["--dra-gpus", "1,GPU-nope"], ENV)
    with pytest.raises(ConfigError, match="no GPU GPU-nope on this node"):
        dra_gpu_indices(cfg.dra, make_inventory(4))


def test_dra_gpus_are_not_advertised_by_the_device_plugin():
    inventory = make_inventory(4, mig={3: ["3g.40gb", "3g.40gb"]})
    resources = build_resources(inventory, PluginSettings(dra_gpus=frozenset({0, 3})))
    ids = {d.gpu_index for r in resources for d in r.devices}
    assert ids == {1, 2}


@pytest.mark.parametrize(
    ("sharing", "shared", "edits"),
    [
        pytest.param(Sharing.MPS, {0: 4}, True, id="MPS shares: limits in the CDI specs"),
        pytest.param(Sharing.TIME_SLICING, {0: 4}, False, id="time-slicing: nothing enforced"),
        pytest.param(Sharing.MPS, {}, False, id="MPS, but no DRA GPU is shared"),
    ],
)
def test_dra_shares_get_mps_edits_only_under_mps(sharing, shared, edits):
    settings = PluginSettings(time_slicing=TimeSlicing(sharing=sharing))
    assert isinstance(dra_mps_edits(settings, shared), MpsEdits) is edits


@pytest.mark.parametrize(
    "devices",
    [
        pytest.param(None, id="every device"),
        pytest.param(("1", "2", "6"), id="a devices list"),
    ],
)
@pytest.mark.parametrize(
    "dra",
    [frozenset(), frozenset({6, 7}), frozenset({0, 1, 2}), frozenset(range(8))],
    ids=["no DRA", "DRA 6,7", "DRA 0-2", "all on DRA"],
)
def test_mps_serves_the_same_gpus_whichever_of_them_dra_has(devices, dra):
    """The MPS DaemonSet's --gpus is sharing.mps's devices (`all` or the list), whatever
    --dra-gpus says: the device plugin's shares and the DRA driver's together are those GPUs."""
    inventory = make_inventory(8)
    entry = SharedResource(
        name=GPU_RESOURCE, replicas=2, rename="nvidia.com/gpu-shared", devices=devices
    )
    settings = PluginSettings(time_slicing=TimeSlicing(sharing=Sharing.MPS, resources=(entry,)))
    plugin = {
        d.gpu_index
        for r in build_resources(inventory, replace(settings, dra_gpus=dra))
        if r.shared
        for d in r.devices
    }
    on_dra = set(shared_dra_gpus(inventory, settings, dra))
    spec = ALL if devices is None else ",".join(devices)
    assert plugin | on_dra == {g.index for g in select_gpus(inventory.gpus, spec)}
    assert not plugin & on_dra
