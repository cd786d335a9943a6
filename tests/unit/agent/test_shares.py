"""The share request and annotation contract (DESIGN §12) every part reads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.model import GpuUuid
from agent.resource_names import GPU_RESOURCE
from agent.shares import (
    GPU_COMPUTE,
    GPU_MEMORY,
    LEASE_SHARES_ANNOTATION,
    SHARED_GPU_RESOURCE,
    ContainerShare,
    LeaseShare,
    ShareRequestError,
    decode_allocated,
    decode_gpus,
    decode_lease_shares,
    encode_allocated,
    encode_gpus,
    encode_lease_shares,
    mps_pipe_directory,
    pod_shares,
    share_lock_from_lease,
    share_lock_name,
    share_milli,
)
from tests.builders.pods import container, pod

GI = 1 << 30


def test_a_sized_share_with_compute_is_read_from_limits() -> None:
    p = pod(
        "x",
        "team-a",
        containers=[
            container("main", limits={GPU_RESOURCE: 1, GPU_MEMORY: "20Gi", GPU_COMPUTE: "25"})
        ],
    )
    assert pod_shares(p) == (
        ContainerShare(
            container="main",
            init=False,
            resource=GPU_RESOURCE,
            replicas=1,
            memory_bytes=20 * GI,
            compute_percent=25,
        ),
    )


def test_init_containers_come_first_and_plain_containers_are_skipped() -> None:
    p = pod(
        containers=[
            container("cpu-only", requests={"cpu": "1"}),
            container("app", requests={SHARED_GPU_RESOURCE: 1, GPU_MEMORY: "8Gi"}),
        ],
        init=[container("warm", requests={SHARED_GPU_RESOURCE: 1})],
    )
    shares = pod_shares(p)
    assert [(s.container, s.init, s.memory_bytes) for s in shares] == [
        ("warm", True, None),
        ("app", False, 8 * GI),
    ]


def test_a_plain_gpu_is_a_share_only_where_the_node_shares_it() -> None:
    p = pod(containers=[container("main", requests={GPU_RESOURCE: 2})])
    assert pod_shares(p) == ()
    (share,) = pod_shares(p, replica_resources={GPU_RESOURCE})
    assert (share.resource, share.replicas, share.memory_bytes) == (GPU_RESOURCE, 2, None)


@pytest.mark.parametrize(
    ("asks", "match"),
    [
        pytest.param(
            {GPU_MEMORY: "4Gi"},
            r"main\): gputopo.io/gpu-memory/.* without a replica",
            id="no replica",
        ),
        pytest.param(
            {GPU_RESOURCE: 2, GPU_MEMORY: "4Gi"},
            r"2 replicas of nvidia.com/gpu with .*exactly one replica",
            id="two replicas",
        ),
        pytest.param(
            {GPU_RESOURCE: 1, GPU_COMPUTE: "101"},
            r"gpu-compute must be 1..100, got '101'",
            id="101",
        ),
        pytest.param(
            {GPU_RESOURCE: 1, GPU_COMPUTE: "0"}, r"gpu-compute must be positive", id="compute 0"
        ),
        pytest.param(
            {GPU_RESOURCE: 1, GPU_MEMORY: "lots"}, r"gpu-memory: not a quantity", id="bad memory"
        ),
        pytest.param(
            {SHARED_GPU_RESOURCE: 1, GPU_RESOURCE: 2},
            r"beside whole GPUs or MIG devices \(nvidia.com/gpu\)",
            id="beside whole GPUs",
        ),
        pytest.param(
            {GPU_RESOURCE: 1, GPU_MEMORY: "1Gi", "nvidia.com/mig-1g.10gb": 1},
            r"beside whole GPUs or MIG devices \(nvidia.com/mig-1g.10gb\)",
            id="beside MIG",
        ),
    ],
)
def test_malformed_requests_name_the_pod_container_and_field(asks, match) -> None:
    p = pod("x", "team-a", containers=[container("main", requests=asks)])
    with pytest.raises(ShareRequestError, match=r"pod team-a/x: spec.containers\[0\] \(main\)"):
        pod_shares(p)
    with pytest.raises(ShareRequestError, match=match):
        pod_shares(p)


@pytest.mark.parametrize(
    ("memory", "compute", "milli"),
    [
        pytest.param(20 * GI, None, 250, id="a quarter by memory"),
        pytest.param(20 * GI, 50, 500, id="compute is larger"),
        pytest.param(1, None, 1, id="at least 1"),
        pytest.param(81 * GI, None, 1000, id="capped at a GPU"),
    ],
)
def test_share_milli_is_the_larger_fraction(memory, compute, milli) -> None:
    assert (
        share_milli(memory_bytes=memory, compute_percent=compute, gpu_memory_bytes=80 * GI) == milli
    )


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=20),
        st.text(min_size=1, max_size=40),
        max_size=5,
    )
)
def test_gpus_annotation_round_trips(chosen) -> None:
    assert decode_gpus(encode_gpus(chosen)) == chosen


def test_allocated_annotation_round_trips() -> None:
    allocated = {"app": ("GPU-a::1",), "warm": ("GPU-a::1", "GPU-a::2")}
    assert decode_allocated(encode_allocated(allocated)) == allocated


@pytest.mark.parametrize(
    ("decoder", "text", "match"),
    [
        pytest.param(decode_gpus, "{", r"gputopo.io/gpus: not JSON", id="gpus not JSON"),
        pytest.param(decode_gpus, "[]", r"gputopo.io/gpus: expected a JSON object", id="list"),
        pytest.param(decode_gpus, '{"a": 3}', r"container 'a': expected a GPU UUID", id="number"),
        pytest.param(
            decode_allocated, '{"a": "x"}', r"allocated: container 'a': expected a list", id="str"
        ),
    ],
)
def test_bad_annotations_are_named(decoder, text, match) -> None:
    with pytest.raises(ShareRequestError, match=match):
        decoder(text)


def test_lock_and_pipe_names() -> None:
    assert share_lock_name("node-a") == "gputopo-share-node-a"
    assert mps_pipe_directory("/run/gputopo/mps/", 1001) == "/run/gputopo/mps/1001/pipe"


def _lease(**spec) -> dict:
    return {
        "metadata": {
            "name": "gputopo-share-n", "namespace": "gputopo-system", "resourceVersion": "7",
            "annotations": {"gputopo.io/pod": "team-a/x"},
        },
        "spec": spec,
    }  # fmt: skip


def test_the_lease_gives_each_share_container_its_gpu_memory_and_compute() -> None:
    given = {
        "main": LeaseShare(gpu=GpuUuid("GPU-1"), memory_bytes=20 * 1024**3, compute_percent=30),
        "side": LeaseShare(gpu=GpuUuid("GPU-2"), memory_bytes=1024**3),
    }
    lease = _lease(holderIdentity="u")
    lease["metadata"]["annotations"][LEASE_SHARES_ANNOTATION] = encode_lease_shares(given)
    lock = share_lock_from_lease(lease)
    assert (lock.holder, lock.pod_key, dict(lock.shares)) == ("u", "team-a/x", given)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param('{"main": {"gpu": "", "memory": 1}}', "gpu: expected a GPU UUID", id="no GPU"),
        pytest.param('{"main": {"gpu": "G", "memory": 0}}', "memory: expected bytes > 0", id="0 B"),
        pytest.param('{"main": {"gpu": "G", "memory": 1, "compute": 101}}',
                     "compute: expected 1..100", id="compute 101"),
        pytest.param('["main"]', "expected a JSON object", id="a list"),
    ],
)  # fmt: skip
def test_a_malformed_lease_shares_annotation_is_refused_naming_the_field(text, message) -> None:
    with pytest.raises(ShareRequestError, match=message):
        decode_lease_shares(text)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        pytest.param({"renewTime": "yesterday"}, r"spec.renewTime: not RFC3339", id="time"),
        pytest.param(
            {"leaseDurationSeconds": -1}, r"spec.leaseDurationSeconds: expected >= 1: -1", id="-1"
        ),
    ],
)
def test_a_malformed_share_lease_is_named(spec, match) -> None:
    with pytest.raises(ShareRequestError, match=rf"Lease gputopo-system/gputopo-share-n: {match}"):
        share_lock_from_lease(_lease(**spec))
