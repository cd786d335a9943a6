"""CEL selectors with the Kubernetes extensions (quantity, semver), compiled once per expression."""

from __future__ import annotations

import itertools

import pytest

from scheduler.claims.errors import SelectorError
from scheduler.claims.model import Device
from scheduler.claims.parse import parse_slice
from scheduler.claims.selectors import AttributeReads, Selectors
from scheduler.claims.semver import Semver, parse_semver
from tests.builders.claims import DRIVER, gpu_device, slice_obj

DEVICE = parse_slice(
    slice_obj(
        "n1",
        [
            gpu_device(
                0,
                numaNode=1,
                productName="NVIDIA H100",
                versions={"driverVersion": "550.54.15", "cudaComputeCapability": "9.0.0"},
                shared=True,
            )
        ],
    )
).devices[0]
D = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(f'device.driver == "{DRIVER}"', True, id="driver"),
        pytest.param(f'{D}.productName.startsWith("NVIDIA")', True, id="string attribute"),
        pytest.param(f"{D}.numaNode == 1", True, id="int attribute"),
        pytest.param("device.allowMultipleAllocations", True, id="allowMultipleAllocations"),
        pytest.param(f'{C}.memory.compareTo(quantity("80Gi")) == 0', True, id="compareTo"),
        pytest.param(f'{C}.memory == quantity("81920Mi")', True, id="== across units"),
        pytest.param(f'{C}.memory.isGreaterThan(quantity("40Gi"))', True, id="isGreaterThan"),
        pytest.param(f'{C}.memory.isLessThan(quantity("40Gi"))', False, id="isLessThan"),
        pytest.param(f'{C}.memory.sub(quantity("16Gi")) == quantity("64Gi")', True, id="sub"),
        pytest.param(f"{C}.memory.add(1).asInteger() == 85899345921", True, id="add int"),
        pytest.param('quantity("500m").isInteger()', False, id="isInteger"),
        pytest.param('quantity("1.5").asApproximateFloat() == 1.5', True, id="float"),
        pytest.param('quantity("-2").sign() == -1', True, id="sign"),
        pytest.param('isQuantity("10Gi") && !isQuantity("ten")', True, id="isQuantity"),
        pytest.param(f'{D}.driverVersion.isGreaterThan(semver("550.0.0"))', True, id="semver >"),
        pytest.param(f'{D}.driverVersion.compareTo(semver("560.1.0")) < 0', True, id="compareTo"),
        pytest.param(f"{D}.cudaComputeCapability.major() == 9", True, id="major"),
        pytest.param(f'{D}.driverVersion == semver("550.54.15")', True, id="semver =="),
        pytest.param('semver("v1.2", true) == semver("1.2.0")', True, id="normalize"),
        pytest.param('isSemver("1.2.3") && !isSemver("1.2")', True, id="isSemver"),
        pytest.param('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True, id="pre-release"),
        pytest.param('"x" in device.attributes["other.io"]', False, id="unknown domain is empty"),
    ],
)
def test_kubernetes_extensions(expression: str, expected: bool) -> None:
    assert Selectors().matches(expression, DEVICE) is expected


@pytest.mark.parametrize(
    ("expression", "match"),
    [
        pytest.param("device.driver ==", "does not compile", id="syntax"),
        pytest.param(f"{D}.missing == 1", "no such key", id="missing attribute"),
        pytest.param(f"{D}.numaNode", "gives int, not bool", id="not a bool"),
        pytest.param(f'{C}.memory.isGreaterThan(semver("1.0.0"))', "Error", id="mixed types"),
        pytest.param('quantity("lots") == quantity("1")', "Error", id="bad quantity"),
    ],
)
def test_failures_name_the_expression(expression: str, match: str) -> None:
    with pytest.raises(SelectorError, match=match) as info:
        Selectors().matches(expression, DEVICE)
    assert info.value.expression == expression


def test_each_expression_compiles_once_and_verdicts_are_kept() -> None:
    selectors = Selectors()
    expr = f"{D}.numaNode == 1"
    first = selectors.program(expr)
    assert selectors.matches(expr, DEVICE)
    assert selectors.program(expr) is first
    assert selectors.matches(expr, DEVICE)


def test_a_new_domain_reaches_devices_seen_before() -> None:
    selectors = Selectors()
    assert selectors.matches(f"{D}.numaNode == 1", DEVICE)
    assert not selectors.matches('"x" in device.capacity["late.io"]', DEVICE)


@pytest.mark.parametrize(
    ("text", "normalize", "expected"),
    [
        pytest.param("1.2.3", False, Semver(1, 2, 3), id="plain"),
        pytest.param("1.2.3-rc.1+b5", False, Semver(1, 2, 3, ("rc", "1"), "b5"), id="full"),
        pytest.param("v01.2", True, Semver(1, 2, 0), id="normalized"),
    ],
)
def test_semver_parse(text: str, normalize: bool, expected: Semver) -> None:
    assert parse_semver(text, normalize=normalize) == expected


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "v1.2.3", "1.2.3-", ""])
def test_semver_strict_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a semantic version"):
        parse_semver(text)


def test_semver_precedence() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
    ]
    parsed = [parse_semver(t) for t in ordered]
    assert all(a.compare(b) == -1 and b.compare(a) == 1 for a, b in itertools.pairwise(parsed))
    assert parse_semver("1.0.0+a").compare(parse_semver("1.0.0+b")) == 0


def _gpu(minor: int, **attrs: object) -> Device:
    return parse_slice(slice_obj("n1", [gpu_device(minor, **attrs)])).devices[0]


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f"{D}.numaNode == 1", id="one name"),
        pytest.param(f'{D}["numaNode"] == 1', id="name by index"),
        pytest.param(f'{D}.exists(k, k == "numaNode" && {D}.numaNode == 1)', id="domain iterated"),
        pytest.param(
            'device.attributes.exists(d, "numaNode" in device.attributes[d]'
            " && device.attributes[d].numaNode == 1)",
            id="every domain",
        ),
        pytest.param('device["attributes"]["gpu.gputopo.io"].numaNode == 1', id="device by index"),
        pytest.param(f"has({D}.numaNode) && {D}.numaNode == 1", id="has"),
    ],
)
def test_devices_that_differ_where_the_expression_reads_get_their_own_verdicts(
    expression: str,
) -> None:
    """Verdicts are shared between devices that look the same to an expression; these differ
    in what each expression reads (numaNode, or how many attributes), whatever way it reads it."""
    selectors = Selectors()
    one, zero, other = _gpu(0, numaNode=1), _gpu(1, numaNode=0), _gpu(2, numaNode=1)
    assert selectors.matches(expression, one) is True
    assert selectors.matches(expression, zero) is False
    assert selectors.matches(expression, other) is True
    assert Selectors().matches(expression, zero) is False


def test_a_name_the_expression_does_not_read_is_not_seen() -> None:
    selectors = Selectors()
    expr = f'{D}.productName == "A"'
    assert selectors.matches(expr, _gpu(0, productName="A", numaNode=0))
    assert selectors.matches(expr, _gpu(1, productName="A", numaNode=1))
    assert not selectors.matches(expr, _gpu(2, productName="B", numaNode=0))
    with pytest.raises(SelectorError, match="no such key"):
        selectors.matches(expr, _gpu(3, numaNode=0))


def test_attribute_reads_grow_by_what_each_expression_may_read() -> None:
    """A name read, a domain read whole, then the whole map: what is kept grows, and its
    version with it; an expression read before changes nothing."""
    reads = AttributeReads()
    reads.note_expression('device.attributes["a.io"].x == 1')
    assert (reads.keeps("a.io/x"), reads.keeps("a.io/y"), reads.version) == (True, False, 1)
    reads.note_expression('device.attributes["a.io"].x == 2 && device.driver == "d"')
    assert reads.version == 1
    reads.note_expression('"y" in device.attributes["b.io"]')
    assert (reads.keeps("b.io/anything"), reads.keeps("c.io/z"), reads.version) == (True, False, 2)
    reads.note_name("c.io/z")
    assert (reads.keeps("c.io/z"), reads.version) == (True, 3)
    reads.note_expression("device.attributes.size() > 0")
    assert (reads.keeps("d.io/w"), reads.version) == (True, 4)
