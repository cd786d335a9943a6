"""Socket names: one per resource name, the same on every run, safe in a file name."""

from __future__ import annotations

import re

import pytest

from deviceplugin.kubelet_api import MAX_SOCKET_NAME, socket_name

SAFE = re.compile(r"gputopo-[A-Za-z0-9._-]+\.sock")


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param("nvidia.com/gpu", "gputopo-gpu.sock", id="whole GPUs keep today's name"),
        pytest.param("nvidia.com/mig-1g.10gb", "gputopo-mig-1g.10gb.sock", id="MIG profile"),
        pytest.param("nvidia.com/gpu.shared", "gputopo-gpu.shared.sock", id="time-sliced"),
        pytest.param("example.com/gpu", "gputopo-example.com_gpu.sock", id="another domain"),
        pytest.param("nvidia.com/my_gpu", "gputopo-nvidia.com_my_gpu.sock", id="tail with _"),
    ],
)
def test_socket_names(resource, expected):
    assert socket_name(resource) == expected


def test_names_that_shared_a_socket_before_get_one_each():
    names = [
        "nvidia.com/gpu",
        "example.com/gpu",
        "example.com.gpu/x",
        "nvidia.com/example.com_gpu",
        "example.com/com_gpu",
        "example/com_gpu",
        "a.b/c",
        "a/b.c",
        "Bad Name!",
        "gpu",
        "nvidia.com/" + "x" * 63,
    ]
    sockets = [socket_name(n) for n in names]
    assert len(set(sockets)) == len(names)
    assert all(SAFE.fullmatch(s) and len(s) <= MAX_SOCKET_NAME for s in sockets), sockets
    assert sockets == [socket_name(n) for n in names]  # the same every time


def test_a_name_too_long_for_a_socket_path_is_hashed():
    long_name = "a" * 60 + ".example.com/gpu"
    name = socket_name(long_name)
    assert re.fullmatch(r"gputopo-_[0-9a-f]{32}\.sock", name)
    assert name != socket_name(long_name.replace("gpu", "gpv"))
