"""The NRT GPU zone attribute `sharePods`: each share container's use, read back as written."""

from __future__ import annotations

import pytest

from agent.share_pods import PodShare, ShareCodecError, decode_share_pods, encode_share_pods

USES = (
    PodShare(pod="team-a/train", uid="u-1", container="main", memory_bytes=20 << 30,
             compute_percent=40),
    PodShare(pod="team-b/x", container="side", memory_bytes=1 << 30, replicas=2),
)  # fmt: skip


def test_uses_are_read_back_as_written_in_a_stable_order() -> None:
    text = encode_share_pods(USES)
    assert text == encode_share_pods(reversed(USES))
    assert sorted(decode_share_pods(text), key=lambda u: u.pod) == sorted(USES, key=lambda u: u.pod)
    assert decode_share_pods("") == ()


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("team-a/train:u:1:5", id="a field short"),
        pytest.param("train/main:u:1:5:-", id="no namespace"),
        pytest.param("team-a/train/main:u:x:5:-", id="replicas not a number"),
        pytest.param("team-a/train/main:u:1:5:most", id="percent not a number"),
    ],
)
def test_a_malformed_entry_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ShareCodecError, match=repr(text).replace("(", r"\(")):
        decode_share_pods(text)
