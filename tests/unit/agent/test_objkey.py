"""`agent/objkey.py`: the one `namespace/name` key of namespaced objects."""

from __future__ import annotations

import pytest

from agent.objkey import DEFAULT_NAMESPACE, key_of, object_key, split_key


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
