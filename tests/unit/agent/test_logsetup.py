"""`--log-format text|json` and a handler that survives a replaced or closed stderr."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from agent import logsetup


@pytest.fixture
def restore_root():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_structured_keys(restore_root, monkeypatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    logsetup.configure("json")
    logging.getLogger("gputopo.test").warning("GPU %d lost", 3, extra={"gpu_uuid": "GPU-1"})
    record = json.loads(buf.getvalue())
    assert record["msg"] == "GPU 3 lost"
    assert record["gpu_uuid"] == "GPU-1"
    assert record["level"] == "WARNING"


def test_handler_follows_sys_stderr_after_the_old_stream_closed(restore_root, monkeypatch) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logsetup.configure("text")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("gputopo.test").error("still logging")
    assert "ERROR gputopo.test: still logging" in second.getvalue()
