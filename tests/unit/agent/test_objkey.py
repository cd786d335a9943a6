"""`agent/objkey.py`: the one `namespace/name` key of namespaced objects."""

from __future__ import annotations

import pytest

from agent.objkey import DEFAULT_NAMESPACE, key_of, name_problem, object_key, split_key


def test_object_key_is_the_familiar_text() -> None:
    key = object_key("ml", "train-0")
    assert key == "ml/train-0"
    assert split_key(key) == ("ml", "train-0")


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param({"namespace": "ml", "name": "a"}, "ml/a", id="namespaced"),
        pytest.param({"name": "a"}, f"{DEFAULT_NAMESPACE}/a", id="no namespace"),
        pytest.param({"namespace": None, "name": "a"}, "default/a", id="null namespace"),
        pytest.param({"namespace": "", "name": "a"}, "default/a", id="empty namespace"),
        pytest.param({}, "default/", id="no name"),
    ],
)
def test_key_of_reads_the_metadata(metadata: dict[str, object], expected: str) -> None:
    assert key_of({"metadata": metadata}) == expected


def test_key_of_an_object_without_metadata() -> None:
    assert key_of({}) == object_key("default", "")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        pytest.param("gpu-node-1", None, id="plain"),
        pytest.param("ip-10-0-1-2.ec2.internal", None, id="dotted"),
        pytest.param("GPU-Node", "not a valid name (RFC 1123", id="upper case"),
        pytest.param("node_1", "not a valid name (RFC 1123", id="underscore"),
        pytest.param("-node", "not a valid name (RFC 1123", id="leading dash"),
        pytest.param("", "not a valid name (RFC 1123", id="empty"),
        pytest.param("a" * 254, "254 characters, at most 253 allowed", id="too long"),
    ],
)
def test_name_problem_follows_rfc_1123_subdomains(name, problem) -> None:
    found = name_problem(name)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        pytest.param("gputopo-system", None, id="plain"),
        pytest.param("team.a", "not a valid name (RFC 1123", id="a dot"),
        pytest.param("n" * 64, "64 characters, at most 63 allowed", id="too long"),
    ],
)
def test_namespaces_are_labels(name, problem) -> None:
    found = name_problem(name, label=True)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)
