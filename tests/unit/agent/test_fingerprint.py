"""pfp0v001 pods fingerprint against the Go implementation's golden vectors."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent.fingerprint import is_compatible, pod_hash, pods_fingerprint

DATA = Path(__file__).parent / "data"


def _golden_pods() -> list[tuple[str, str]]:
    lines = (DATA / "pods-100.txt").read_text(encoding="utf-8").splitlines()
    return [(ns, name) for ns, name in (line.split() for line in lines if not line.startswith("#"))]


def test_golden_vector_100_pods() -> None:
    pods = _golden_pods()
    assert len(pods) == 100
    assert pods_fingerprint(pods) == "pfp0v001e0db114971e5928c"


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param(
            [
                ("production", "jaeger-dpgjk"),
                ("production", "nginx-rt684"),
                ("production", "envoy-g9m22"),
            ],
            "pfp0v001607b76a0e9d3aeb4",
            id="3 pods, 1 namespace",
        ),
        pytest.param(
            [
                ("analytics", "controller-69dkj"),
                ("kube-public", "subscriber-tq6v7"),
                ("kube-public", "transformer-hfbng"),
                ("kube-public", "validator-c6pn5"),
                ("kube-system", "proxy-wszrd"),
                ("middleware", "processor-jkrl4"),
                ("network", "gateway-vsll5"),
                ("network", "importer-kzdfr"),
                ("network", "importer-q5vt9"),
                ("staging", "prometheus-bwgbn"),
            ],
            "pfp0v001567144e4a561bb5a",
            id="10 pods, 7 namespaces",
        ),
    ],
)
def test_small_golden_vectors(pods: list[tuple[str, str]], expected: str) -> None:
    assert pods_fingerprint(pods) == expected


def test_order_does_not_matter() -> None:
    pods = _golden_pods()
    shuffled = pods[:]
    random.Random(7).shuffle(shuffled)
    assert pods_fingerprint(shuffled) == pods_fingerprint(pods)


def test_namespace_is_part_of_the_identity() -> None:
    assert pod_hash("a", "pod") != pod_hash("b", "pod")
    assert pods_fingerprint([("a", "pod")]) != pods_fingerprint([("b", "pod")])


def test_empty_set_is_well_formed() -> None:
    empty = pods_fingerprint([])
    assert is_compatible(empty)
    assert empty == "pfp0v001ef46db3751d8e999"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "x",
        "pfp0vX",
        "wrngv001e477a4e3b2fc0ec6",
        "pfp0v000e477a4e3b2fc0ec6",
        "pfp0v001E477A4E3B2FC0EC6",
    ],
)
def test_malformed_fingerprints_are_incompatible(text: str) -> None:
    assert not is_compatible(text)
