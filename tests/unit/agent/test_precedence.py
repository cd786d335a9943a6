"""flag > environment > config file > default: which source wins, and how it is named."""

from __future__ import annotations

import pytest

from agent.precedence import (
    Setting,
    env_var,
    first_set,
    first_value,
    from_env,
    from_flag,
    from_value,
)

FILE = Setting(source="agent.yaml: nodeName", value="from-file")


@pytest.mark.parametrize(
    ("flag", "variable"),
    [
        pytest.param("--node-name", "GPUTOPO_NODE_NAME", id="flag"),
        pytest.param("node_name", "GPUTOPO_NODE_NAME", id="dest"),
        pytest.param("--seed", "GPUTOPO_SEED", id="one word"),
    ],
)
def test_env_var(flag, variable) -> None:
    assert env_var(flag) == variable


@pytest.mark.parametrize(
    ("flag", "environ", "source", "value"),
    [
        pytest.param("a", {"GPUTOPO_NODE_NAME": "b"}, "flag --node-name", "a", id="flag wins"),
        pytest.param(
            None,
            {"GPUTOPO_NODE_NAME": "b", "NODE_NAME": "c"},
            "environment GPUTOPO_NODE_NAME",
            "b",
            id="first variable",
        ),
        pytest.param(None, {"NODE_NAME": "c"}, "environment NODE_NAME", "c", id="alias"),
        pytest.param(None, {"NODE_NAME": ""}, "environment NODE_NAME", "", id="empty is a value"),
        pytest.param(None, {}, FILE.source, FILE.value, id="file"),
    ],
)
def test_first_set_follows_precedence(flag, environ, source, value) -> None:
    found = first_set(
        from_flag("--node-name", flag), from_env(environ, "GPUTOPO_NODE_NAME", "NODE_NAME"), FILE
    )
    assert found == Setting(source=source, value=value)


def test_blank_is_unset_skips_an_empty_variable() -> None:
    environ = {"GPUTOPO_X": "", "X": "y"}
    assert from_env(environ, "GPUTOPO_X", blank_is_unset=True) is None
    assert from_env(environ, "GPUTOPO_X", "X", blank_is_unset=True) == Setting(
        source="environment X", value="y"
    )


def test_skip_blank_falls_through_to_the_next_source() -> None:
    assert first_set(from_flag("--x", ""), FILE, skip_blank=True) == FILE
    assert first_set(from_flag("--x", ""), FILE) == Setting(source="flag --x", value="")


def test_none_leaves_a_setting_unset() -> None:
    assert from_flag("--x", None) is None
    assert from_value("file", None) is None
    assert first_set(None, None) is None
    assert first_value(None, default="text") == "text"
    assert first_value(from_value("file", 0), default=5) == 0
