"""The status file between `gputopo-agent mps` and the agent's device plugin."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.mps.status import (
    STALE_AFTER_S,
    DaemonStatus,
    MpsStatus,
    decode_status,
    down_reason,
    encode_status,
    write_status,
)

daemons = st.builds(
    DaemonStatus,
    uid=st.integers(0, 2**31),
    up=st.booleans(),
    restarts=st.integers(0, 10**6),
    reason=st.text(max_size=40),
)
statuses = st.builds(
    MpsStatus,
    written_at=st.floats(0, 4e9),
    gpus=st.lists(st.text(min_size=1, max_size=12), max_size=4).map(tuple),
    daemons=st.lists(daemons, max_size=4).map(tuple),
)


@given(statuses)
def test_a_status_reads_back_as_written(status):
    assert decode_status(encode_status(status)) == status


def _write(tmp_path, *daemons: DaemonStatus, at: float = 100.0):
    path = tmp_path / "status.json"
    write_status(path, MpsStatus(written_at=at, gpus=("GPU-0",), daemons=daemons))
    return path


def test_every_daemon_up_and_fresh_is_healthy(tmp_path):
    path = _write(tmp_path, DaemonStatus(uid=0, up=True), DaemonStatus(uid=1000, up=True))
    assert down_reason(path, now=100.0 + STALE_AFTER_S) is None
    assert oct(path.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize(
    ("daemons", "now", "reason"),
    [
        pytest.param(
            (DaemonStatus(uid=0, up=True), DaemonStatus(uid=1000, up=False, reason="exited")),
            100.0,
            "MPS control daemon down for uid 1000 (exited)",
            id="one user's daemon down",
        ),
        pytest.param((), 100.0, "MPS serves no user", id="no daemon"),
        pytest.param(
            (DaemonStatus(uid=0, up=True),),
            100.0 + STALE_AFTER_S + 1,
            "is more than 30s old: the MPS supervisor stopped updating it",
            id="stale",
        ),
    ],
)
def test_down_reasons(tmp_path, daemons, now, reason):
    assert reason in (down_reason(_write(tmp_path, *daemons), now) or "")


def test_no_file_means_mps_is_not_running(tmp_path):
    assert "MPS is not running: no" in (down_reason(tmp_path / "status.json", 0.0) or "")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{", id="not JSON"),
        pytest.param(json.dumps({"version": 2}), id="another version"),
        pytest.param(json.dumps({"version": 1, "gpus": []}), id="a field missing"),
    ],
)
def test_an_unreadable_file_is_down_with_the_reason(tmp_path, text):
    path = tmp_path / "status.json"
    path.write_text(text, encoding="utf-8")
    assert (down_reason(path, 0.0) or "").startswith(f"MPS status {path} unreadable")
