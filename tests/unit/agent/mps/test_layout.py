"""Whom MPS serves (`--users`) and where each user's directories are."""

from __future__ import annotations

import pytest

from agent.mps.layout import MpsLayout, parse_users, primary_gid
from agent.shares import mps_pipe_directory, mps_shm_directory


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0", [(0, 0)], id="root alone (the default)"),
        pytest.param("1000:2000, 0", [(0, 0), (1000, 2000)], id="sorted, explicit group"),
        pytest.param("0,0,0", [(0, 0)], id="each user once"),
        pytest.param("4242", [(4242, primary_gid(4242))], id="group from passwd, else the uid"),
    ],
)
def test_users_are_parsed_sorted_and_once(text, expected):
    assert [(u.uid, u.gid) for u in parse_users(text)] == expected


def test_a_user_absent_from_passwd_gets_its_uid_as_group():
    assert primary_gid(987654) == 987654


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("alice", "'alice' is not UID or UID:GID", id="a name"),
        pytest.param("1000:x", "'1000:x' is not UID or UID:GID", id="a bad group"),
        pytest.param("-1", "'-1' is not UID", id="negative"),
        pytest.param(" , ", "no user listed", id="empty"),
    ],
)
def test_bad_users_are_refused_naming_the_entry(text, message):
    with pytest.raises(ValueError, match=f"--users: {message}"):
        parse_users(text)


def test_the_pipe_directory_is_the_one_allocate_mounts(tmp_path):
    layout = MpsLayout(tmp_path / "mps")
    assert str(layout.pipe_dir(1000)) == mps_pipe_directory(str(tmp_path / "mps"), 1000)
    assert layout.log_dir(1000).parent == layout.pipe_dir(1000).parent == layout.user_dir(1000)
    assert layout.shm_dir(1000) == tmp_path / "mps" / "1000" / "shm"
    assert str(layout.shm_dir(1000)) == mps_shm_directory(str(tmp_path / "mps"), 1000)
    assert layout.status_file.parent == layout.root
