"""`agent/plural.py`: counted nouns, never "1 GPUs"."""

from __future__ import annotations

import pytest

from agent.plural import counted


@pytest.mark.parametrize(
    ("count", "noun", "plural", "text"),
    [
        pytest.param(1, "GPU", None, "1 GPU", id="one"),
        pytest.param(0, "GPU", None, "0 GPUs", id="zero"),
        pytest.param(8, "device", None, "8 devices", id="many"),
        pytest.param(1, "entry", "entries", "1 entry", id="one, irregular"),
        pytest.param(3, "entry", "entries", "3 entries", id="many, irregular"),
    ],
)
def test_counted(count, noun, plural, text) -> None:
    assert counted(count, noun, plural) == text
