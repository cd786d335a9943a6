"""GFD-style node labels: the values GFD writes for the same GPUs, MIG layout and sharing."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import labels as lb
from agent.model import LinkMatrix, MigMode, NodeInventory
from agent.shares import Sharing
from tests.builders.topology import dgx_h100, make_gpu, mig_mixed

_DRIVER = {
    lb.DRIVER_MAJOR: "550",
    lb.DRIVER_MINOR: "54",
    lb.DRIVER_REVISION: "15",
    lb.DRIVER_FULL: "550.54.15",
    lb.OLD_DRIVER_MAJOR: "550",
    lb.OLD_DRIVER_MINOR: "54",
    lb.OLD_DRIVER_REV: "15",
    lb.RUNTIME_MAJOR: "12",
    lb.RUNTIME_MINOR: "4",
    lb.RUNTIME_FULL: "12.4",
    lb.OLD_RUNTIME_MAJOR: "12",
    lb.OLD_RUNTIME_MINOR: "4",
}


def _sharing(
    kind: Sharing = Sharing.TIME_SLICING, **by_resource: lb.Replication
) -> lb.SharingLabels:
    """`gpu=...` shares `nvidia.com/gpu`, `mig_1g_10gb=...` shares `nvidia.com/mig-1g.10gb`."""
    names = {
        "nvidia.com/" + k.replace("mig_", "mig-", 1).replace("_", "."): v
        for k, v in by_resource.items()
    }
    return lb.SharingLabels(sharing=kind, resources=names)


def _all_mig(layout: str, gpus: int = 2) -> NodeInventory:
    cells = [["X" if i == j else "NV18" for j in range(gpus)] for i in range(gpus)]
    return NodeInventory(
        gpus=tuple(make_gpu(i, 0, mig=layout) for i in range(gpus)),
        links=LinkMatrix.from_cells(cells),
        driver_version="550.54.15",
        cuda_driver_version=12040,
    )


def test_dgx_h100_labels() -> None:
    assert lb.gfd_labels(dgx_h100()) == {
        lb.PRESENT: "true",
        lb.PRODUCT: "NVIDIA-H100-80GB-HBM3",
        lb.COUNT: "8",
        lb.MEMORY: "81559",
        lb.REPLICAS: "1",
        lb.SHARING_STRATEGY: "none",
        lb.MIG_CAPABLE: "true",
        lb.MIG_STRATEGY: "mixed",
        lb.MPS_CAPABLE: "false",
        lb.COMPUTE_MAJOR: "9",
        lb.COMPUTE_MINOR: "0",
        lb.FAMILY: "hopper",
        **_DRIVER,
    }


def test_strategy_none_writes_no_mig_labels() -> None:
    got = lb.gfd_labels(mig_mixed(), "none")
    assert lb.MIG_STRATEGY not in got
    assert not [k for k in got if k.startswith("nvidia.com/mig-")]
    assert (got[lb.PRODUCT], got[lb.COUNT]) == ("NVIDIA-H100-80GB-HBM3", "2")


def test_mixed_labels_every_profile_on_the_node() -> None:
    got = lb.gfd_labels(mig_mixed(), "mixed")
    assert {k: v for k, v in got.items() if k.startswith("nvidia.com/mig-")} == {
        "nvidia.com/mig-1g.10gb.count": "3",
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "nvidia.com/mig-1g.10gb.memory": "10240",
        "nvidia.com/mig-1g.10gb.slices.gi": "1",
        "nvidia.com/mig-1g.10gb.slices.ci": "1",
        "nvidia.com/mig-1g.10gb.replicas": "1",
        "nvidia.com/mig-1g.10gb.sharing-strategy": "none",
        "nvidia.com/mig-3g.40gb.count": "1",
        "nvidia.com/mig-3g.40gb.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
        "nvidia.com/mig-3g.40gb.memory": "40960",
        "nvidia.com/mig-3g.40gb.slices.gi": "3",
        "nvidia.com/mig-3g.40gb.slices.ci": "3",
        "nvidia.com/mig-3g.40gb.replicas": "1",
        "nvidia.com/mig-3g.40gb.sharing-strategy": "none",
    }
    # the whole GPU's labels count both GPUs, as GFD's do
    assert (got[lb.COUNT], got[lb.REPLICAS]) == ("2", "1")


def test_mixed_names_a_media_extension_profile_as_its_resource() -> None:
    got = lb.gfd_labels(_all_mig("1g.10gb+me@0:1,1g.10gb@1:1", gpus=1), "mixed")
    assert got["nvidia.com/mig-1g.10gb.me.count"] == "1"
    assert got["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gbme"
    assert got["nvidia.com/mig-1g.10gb.count"] == "1"


@pytest.mark.parametrize(
    ("profile", "slices"),
    [("1c.3g.40gb", ("3", "1")), ("3g.40gb", ("3", "3")), ("odd-name", None)],
)
def test_mig_slices_read_from_the_profile_name_or_left_unsaid(profile, slices) -> None:
    """A compute-instance profile names both counts; a name NVML gave that says neither writes
    neither (and breaks nothing)."""
    got = lb.gfd_labels(_all_mig(f"{profile}@0:4", gpus=1), "mixed")
    resource = f"nvidia.com/mig-{profile}"
    said = (got.get(f"{resource}.slices.gi"), got.get(f"{resource}.slices.ci"))
    assert said == (slices or (None, None))
    assert got[f"{resource}.count"] == "1"
    assert all(lb.managed(k) for k in got), got


def test_every_gpu_in_mig_mode_shares_nothing_whole() -> None:
    sharing = _sharing(gpu=lb.Replication(4))
    got = lb.gfd_labels(_all_mig("3g.40gb@0:4"), "mixed", sharing)
    assert (got[lb.REPLICAS], got[lb.SHARING_STRATEGY]) == ("0", "none")
    assert got[lb.PRODUCT] == "NVIDIA-H100-80GB-HBM3"


def test_single_strategy_names_the_mig_profile() -> None:
    got = lb.gfd_labels(_all_mig("1g.10gb@0:1,1g.10gb@1:1"), "single")
    assert got[lb.PRODUCT] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert (got[lb.COUNT], got[lb.MEMORY], got[lb.REPLICAS]) == ("4", "10240", "1")
    assert (got[lb.SLICES_GI], got[lb.SLICES_CI]) == ("1", "1")
    assert not [k for k in got if k.startswith("nvidia.com/mig-")]


@pytest.mark.parametrize(
    "inventory",
    [
        pytest.param(mig_mixed(), id="a GPU not in MIG mode"),
        pytest.param(_all_mig("3g.40gb@0:4,1g.10gb@4:1"), id="two profiles"),
        pytest.param(
            replace(
                _all_mig("1g.10gb@0:1"),
                gpus=(
                    make_gpu(0, 0, mig="1g.10gb@0:1"),
                    replace(make_gpu(1, 0), mig_mode=MigMode.ENABLED),
                ),
            ),
            id="a GPU in MIG mode without devices",
        ),
    ],
)
def test_single_strategy_marks_a_node_it_cannot_serve_invalid(inventory) -> None:
    got = lb.gfd_labels(inventory, "single")
    assert got[lb.PRODUCT] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert (got[lb.COUNT], got[lb.REPLICAS], got[lb.MEMORY]) == ("0", "0", "0")


def test_single_strategy_without_mig_is_the_whole_gpus() -> None:
    got = lb.gfd_labels(dgx_h100(), "single")
    assert (got[lb.PRODUCT], got[lb.COUNT], got[lb.MIG_STRATEGY]) == (
        "NVIDIA-H100-80GB-HBM3",
        "8",
        "single",
    )


def test_time_slicing_marks_the_product_shared_unless_renamed() -> None:
    shared = lb.gfd_labels(dgx_h100(), sharing=_sharing(gpu=lb.Replication(4)))
    assert shared[lb.PRODUCT] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert (shared[lb.REPLICAS], shared[lb.SHARING_STRATEGY]) == ("4", "time-slicing")
    renamed = _sharing(gpu=lb.Replication(4, renamed=True))
    assert lb.gfd_labels(dgx_h100(), sharing=renamed)[lb.PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    one = lb.gfd_labels(dgx_h100(), sharing=_sharing(gpu=lb.Replication(1)))
    assert (one[lb.PRODUCT], one[lb.SHARING_STRATEGY]) == ("NVIDIA-H100-80GB-HBM3", "none")


def test_a_shared_mig_profile_is_labelled_on_its_resource() -> None:
    sharing = _sharing(mig_1g_10gb=lb.Replication(2))
    got = lb.gfd_labels(mig_mixed(), "mixed", sharing)
    assert got["nvidia.com/mig-1g.10gb.replicas"] == "2"
    assert got["nvidia.com/mig-1g.10gb.sharing-strategy"] == "time-slicing"
    assert got["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"
    assert got["nvidia.com/mig-3g.40gb.replicas"] == "1"
    assert got[lb.REPLICAS] == "1"


def test_mps_capable_only_with_mps_and_no_gpu_in_mig_mode() -> None:
    mps = _sharing(Sharing.MPS, gpu=lb.Replication(2))
    got = lb.gfd_labels(dgx_h100(), sharing=mps)
    assert (got[lb.MPS_CAPABLE], got[lb.SHARING_STRATEGY]) == ("true", "mps")
    assert lb.gfd_labels(mig_mixed(), sharing=mps)[lb.MPS_CAPABLE] == "false"
    assert lb.gfd_labels(dgx_h100())[lb.MPS_CAPABLE] == "false"


@pytest.mark.parametrize(
    ("driver", "cuda", "expected"),
    [
        (
            "535.104.05",
            12020,
            {lb.DRIVER_REVISION: "05", lb.DRIVER_FULL: "535.104.05", lb.RUNTIME_FULL: "12.2"},
        ),
        ("550.54", 12080, {lb.DRIVER_REVISION: "", lb.OLD_DRIVER_REV: "", lb.RUNTIME_MINOR: "8"}),
        ("", 12040, {lb.RUNTIME_FULL: "12.4"}),
        ("r550", 0, {}),
    ],
)
def test_driver_and_cuda_versions(driver, cuda, expected) -> None:
    inventory = replace(dgx_h100(), driver_version=driver, cuda_driver_version=cuda)
    got = lb.gfd_labels(inventory)
    assert {k: got[k] for k in expected} == expected
    if not driver.replace(".", "").isdigit():
        assert lb.DRIVER_MAJOR not in got
        assert lb.OLD_DRIVER_MAJOR not in got
    if cuda == 0:
        assert lb.RUNTIME_MAJOR not in got
        assert lb.OLD_RUNTIME_MAJOR not in got


def test_mig_unsupported_and_no_gpus() -> None:
    gpu = make_gpu(0, 0, product="NVIDIA GeForce RTX 4090 (rev a1)")
    gpu = replace(gpu, mig_mode=MigMode.UNSUPPORTED)
    inv = NodeInventory(gpus=(gpu,), links=LinkMatrix(((None,),)))
    got = lb.gfd_labels(inv)
    assert got[lb.MIG_CAPABLE] == "false"
    assert got[lb.PRODUCT] == "NVIDIA-GeForce-RTX-4090-rev-a1"
    assert lb.gfd_labels(NodeInventory(gpus=(), links=LinkMatrix(()))) == {}


@pytest.mark.parametrize(
    ("text", "value"),
    [("A" * 80, "A" * 63), ("  x  y ", "x-y"), ("weird/name!", "weirdname"), ("-a-", "a")],
)
def test_label_values_are_sanitised_as_gfd_does(text, value) -> None:
    assert lb.label_value(text) == value


_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


@given(st.text(max_size=120))
def test_any_product_name_makes_a_valid_label_value(text) -> None:
    """What NVML calls a GPU never fails the node's label patch."""
    value = lb.label_value(text)
    assert value == "" or _NAME.fullmatch(value), value
    assert lb.label_value(value) == value


@pytest.mark.parametrize("strategy", lb.STRATEGIES)
@pytest.mark.parametrize(
    "sharing",
    [
        lb.NOT_SHARED,
        lb.SharingLabels(
            sharing=Sharing.TIME_SLICING,
            resources={
                "nvidia.com/gpu": lb.Replication(8),
                "nvidia.com/mig-1g.10gb": lb.Replication(7),
            },
        ),
    ],
)
@pytest.mark.parametrize(
    "inventory",
    [dgx_h100(), mig_mixed(), _all_mig("1g.10gb+me@0:1,1g.10gb@1:1"), _all_mig("1g.10gb@0:1")],
)
def test_every_label_is_valid_and_managed(strategy, sharing, inventory) -> None:
    """What the API server would refuse (a bad key or value) fails the whole patch."""
    for key, value in lb.gfd_labels(inventory, strategy, sharing).items():
        prefix, _, name = key.partition("/")
        assert prefix == "nvidia.com", key
        assert _NAME.fullmatch(name), key
        assert key.startswith(lb.PREFIXES), key  # what the admission policy lets the agent write
        assert value == "" or _NAME.fullmatch(value), (key, value)
        assert lb.managed(key), key


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ("8.0", "ampere"),
        ("8.9", "ada-lovelace"),
        ("9.0", "hopper"),
        ("10.0", "blackwell"),
        ("1.0", "undefined"),
    ],
)
def test_family(cc, family) -> None:
    assert lb.gpu_family(cc) == family


def test_label_patch_is_minimal() -> None:
    desired = lb.gfd_labels(dgx_h100())
    assert lb.label_patch(desired, desired) == {}
    current = {**desired, lb.COUNT: "4", "other.io/keep": "x"}
    del current[lb.FAMILY]
    assert lb.label_patch(current, desired) == {lb.COUNT: "8", lb.FAMILY: "hopper"}
    assert lb.label_patch(desired, {}) == dict.fromkeys(desired)


def test_a_profile_gone_from_the_node_loses_its_labels_and_nothing_else() -> None:
    before = {
        **lb.gfd_labels(mig_mixed(), "mixed"),
        "nvidia.com/mig.config": "all-1g.10gb",  # the MIG manager's, not ours
        "nvidia.com/mig-1g.10gb.engines.copy": "1",  # GFD's, never ours
    }
    after = lb.gfd_labels(_all_mig("3g.40gb@0:4", gpus=2), "mixed")
    patch = lb.label_patch(before, after)
    gone = sorted(k for k, v in patch.items() if v is None)
    assert gone == [
        "nvidia.com/mig-1g.10gb.count",
        "nvidia.com/mig-1g.10gb.memory",
        "nvidia.com/mig-1g.10gb.product",
        "nvidia.com/mig-1g.10gb.replicas",
        "nvidia.com/mig-1g.10gb.sharing-strategy",
        "nvidia.com/mig-1g.10gb.slices.ci",
        "nvidia.com/mig-1g.10gb.slices.gi",
    ]


def test_clique_label_is_removed_when_the_node_leaves_its_clique() -> None:
    current = {**lb.gfd_labels(dgx_h100()), lb.CLIQUE: "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13.1"}
    assert lb.label_patch(current, lb.gfd_labels(dgx_h100())) == {lb.CLIQUE: None}
