"""The agent's record of what each share container was given: root-only, kept across restarts,
forgotten once neither the API nor the kubelet lists the pod."""

from __future__ import annotations

import stat

from agent.model import GpuUuid
from agent.share_record import GivenShare, ShareRecord


def given(pod: str, uid: str, container: str = "main") -> GivenShare:
    return GivenShare(
        pod=f"default/{pod}", uid=uid, container=container, init=False, resource="nvidia.com/gpu",
        ids=(f"GPU-0::{len(pod)}",), gpu=GpuUuid("GPU-0"), memory_bytes=10 * 1024**3,
        compute_percent=30,
    )  # fmt: skip


def test_a_new_process_reads_what_an_earlier_one_recorded_from_a_root_only_file(tmp_path):
    path = tmp_path / "state" / "shares.json"
    ShareRecord(path).add(given("a", "uid-a"))
    again = ShareRecord(path)
    assert again.find("default/a", "main") == given("a", "uid-a")
    assert again.of_pod("uid-a") == {"main": given("a", "uid-a")}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_pods_neither_the_api_nor_the_kubelet_lists_are_forgotten(tmp_path):
    record = ShareRecord(tmp_path / "shares.json")
    for name in ("api", "kubelet", "gone"):
        record.add(given(name, f"uid-{name}"))
    assert record.keep({"uid-api"}, {"default/kubelet"}) == 1
    assert sorted(s.pod for s in ShareRecord(tmp_path / "shares.json").all()) == [
        "default/api",
        "default/kubelet",
    ]


def test_an_unreadable_record_starts_empty(tmp_path):
    path = tmp_path / "shares.json"
    path.write_text('{"version": 9, "given": []}', encoding="utf-8")
    assert ShareRecord(path).all() == ()
