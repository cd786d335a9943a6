"""GFD-style node labels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent import labels as lb
from agent.model import LinkMatrix, MigMode, NodeInventory
from tests.builders.topology import dgx_h100, make_gpu, mig_mixed


def test_dgx_h100_labels() -> None:
    assert lb.gfd_labels(dgx_h100()) == {
        lb.PRESENT: "true",
        lb.PRODUCT: "NVIDIA-H100-80GB-HBM3",
        lb.COUNT: "8",
        lb.MEMORY: "81559",
        lb.MIG_CAPABLE: "true",
        lb.MIG_STRATEGY: "mixed",
        lb.COMPUTE_MAJOR: "9",
        lb.COMPUTE_MINOR: "0",
        lb.FAMILY: "hopper",
    }


def test_single_strategy_names_the_mig_profile() -> None:
    gpus = tuple(make_gpu(i, 0, mig="1g.10gb@0:1,1g.10gb@1:1") for i in range(2))
    inv = NodeInventory(gpus=gpus, links=LinkMatrix.from_cells([["X", "NV18"], ["NV18", "X"]]))
    got = lb.gfd_labels(inv, "single")
    assert got[lb.PRODUCT] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert (got[lb.COUNT], got[lb.MEMORY]) == ("4", "10240")
    assert lb.gfd_labels(mig_mixed(), "single")[lb.PRODUCT] == "NVIDIA-H100-80GB-HBM3"


def test_mig_unsupported_and_no_gpus() -> None:
    gpu = make_gpu(0, 0, product="NVIDIA GeForce RTX 4090 (rev a1)")
    gpu = replace(gpu, mig_mode=MigMode.UNSUPPORTED)
    inv = NodeInventory(gpus=(gpu,), links=LinkMatrix(((None,),)))
    got = lb.gfd_labels(inv)
    assert got[lb.MIG_CAPABLE] == "false"
    assert got[lb.PRODUCT] == "NVIDIA-GeForce-RTX-4090--rev-a1"
    assert lb.gfd_labels(NodeInventory(gpus=(), links=LinkMatrix(()))) == {}


@pytest.mark.parametrize(
    ("text", "value"),
    [("A" * 80, "A" * 63), ("  x y ", "x-y"), ("weird/name!", "weird-name"), ("-a-", "a")],
)
def test_label_values_are_valid(text, value) -> None:
    assert lb.label_value(text) == value


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


def test_clique_label_is_removed_when_the_node_leaves_its_clique() -> None:
    current = {**lb.gfd_labels(dgx_h100()), lb.CLIQUE: "5c1f0e7a-3d2b-4c8e-9a61-0b7d2e4f9c13.1"}
    assert lb.label_patch(current, lb.gfd_labels(dgx_h100())) == {lb.CLIQUE: None}
