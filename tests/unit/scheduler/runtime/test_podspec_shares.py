"""Reading a pod's share request (DESIGN §12): what placement gets, and the one-line reason a
malformed request waits with (it names the pod, the container and the field)."""

from __future__ import annotations

import pytest

from scheduler.runtime.cluster.podinfo import read_pod
from scheduler.runtime.cluster.podspec import pod_request
from tests.builders.pods import container, pod

GIB = 1 << 30


def share_container(name: str = "main", **asks: object) -> dict[str, object]:
    return container(name, limits=dict(asks))


def test_a_replica_with_memory_and_compute_is_a_sized_share():
    request = pod_request(
        pod(
            containers=[
                share_container(
                    **{
                        "nvidia.com/gpu.shared": 1,
                        "gputopo.io/gpu-memory": "20Gi",
                        "gputopo.io/gpu-compute": 30,
                    }
                )
            ]
        )
    )
    assert request.gpus == 0
    (only,) = request.shares
    assert (only.memory_bytes, only.compute_percent, only.replicas) == (20 * GIB, 30, 1)
    vector = dict(request.vector)
    assert vector["nvidia.com/gpu.shared"] == 1
    assert "gputopo.io/gpu-memory" not in vector  # never advertised by a node
    assert "gputopo.io/gpu-compute" not in vector


def test_memory_with_a_plain_replica_keeps_the_replica_in_the_resource_check():
    request = pod_request(
        pod(containers=[share_container(**{"nvidia.com/gpu": 1, "gputopo.io/gpu-memory": "8Gi"})])
    )
    assert request.gpus == 0
    assert dict(request.vector)["nvidia.com/gpu"] == 1
    assert request.shares[0].resource == "nvidia.com/gpu"


def test_init_and_app_share_containers_come_in_the_kubelets_order():
    request = pod_request(
        pod(
            init=[share_container("setup", **{"nvidia.com/gpu.shared": 1})],
            containers=[
                share_container(
                    "app", **{"nvidia.com/gpu.shared": 1, "gputopo.io/gpu-memory": "1Gi"}
                )
            ],
        )
    )
    assert [(s.container, s.init) for s in request.shares] == [("setup", True), ("app", False)]


def test_a_plain_gpu_request_is_whole_gpus_with_an_equal_split_reading():
    request = pod_request(pod(containers=[share_container(**{"nvidia.com/gpu": 2})]))
    assert request.gpus == 2
    assert request.shares == ()
    assert [(s.container, s.replicas, s.memory_bytes) for s in request.split] == [("main", 2, None)]


@pytest.mark.parametrize(
    ("asks", "words"),
    [
        pytest.param(
            {"nvidia.com/gpu.shared": 1, "nvidia.com/gpu": 1},
            "a share (nvidia.com/gpu.shared) beside whole GPUs or MIG devices (nvidia.com/gpu)",
            id="share beside whole GPUs",
        ),
        pytest.param(
            {"nvidia.com/gpu.shared": 1, "nvidia.com/mig-1g.10gb": 1},
            "beside whole GPUs or MIG devices (nvidia.com/mig-1g.10gb)",
            id="share beside a MIG device",
        ),
        pytest.param(
            {"nvidia.com/gpu.shared": 1, "gputopo.io/gpu-compute": 120},
            "gputopo.io/gpu-compute must be 1..100, got 120",
            id="compute above 100",
        ),
        pytest.param(
            {"nvidia.com/gpu.shared": 1, "gputopo.io/gpu-compute": 0},
            "gputopo.io/gpu-compute must be positive",
            id="compute 0",
        ),
        pytest.param(
            {"gputopo.io/gpu-memory": "1Gi"},
            "gputopo.io/gpu-memory/gputopo.io/gpu-compute without a replica",
            id="memory without a replica",
        ),
        pytest.param(
            {"nvidia.com/gpu.shared": 2, "gputopo.io/gpu-memory": "1Gi"},
            "2 replicas of nvidia.com/gpu.shared with gputopo.io/gpu-memory",
            id="two replicas with memory",
        ),
    ],
)
def test_a_malformed_share_request_waits_with_a_reason_naming_it(asks, words):
    obj = pod("bad", containers=[share_container("gpu", **asks)])
    obj["spec"]["schedulerName"] = "gputopo-scheduler"
    info = read_pod(obj, "gputopo-scheduler")
    assert info.error is not None
    assert info.error.startswith("pod default/bad: spec.containers[0] (gpu): ")
    assert words in info.error
    assert "\n" not in info.error


def test_a_share_beside_whole_gpus_in_another_container_is_refused():
    obj = pod(
        "mixed",
        containers=[
            share_container("a", **{"nvidia.com/gpu.shared": 1}),
            share_container("b", **{"nvidia.com/gpu": 1}),
        ],
    )
    info = read_pod(obj, "gputopo-scheduler")
    assert info.error == (
        "pod default/mixed: spec.containers[1] (b): whole GPUs or MIG devices (nvidia.com/gpu) "
        "beside a share in another container of the pod"
    )


def test_the_share_annotation_is_read_and_a_malformed_one_reads_as_absent():
    obj = pod("p", containers=[share_container(**{"nvidia.com/gpu.shared": 1})])
    obj["metadata"]["annotations"] = {"gputopo.io/gpus": '{"main":"GPU-1"}'}
    assert read_pod(obj, "s").share_gpus == {"main": "GPU-1"}
    obj["metadata"]["annotations"] = {"gputopo.io/gpus": "not json"}
    assert read_pod(obj, "s").share_gpus == {}


def test_an_init_containers_replica_goes_on_to_the_next_init_and_the_first_app_container():
    one = {"nvidia.com/gpu.shared": 1, "gputopo.io/gpu-memory": "4Gi"}
    request = pod_request(
        pod(
            init=[share_container("fetch", **one), share_container("warm", **one)],
            containers=[share_container("main", **one), share_container("side", **one)],
        )
    )
    assert [s.container for s in request.shares] == ["fetch", "warm", "main", "side"]
    assert request.share_reuse == (0, 0, 0, 3)


def test_a_sidecars_replica_is_its_own():
    one = {"nvidia.com/gpu.shared": 1}
    sidecar = share_container("proxy", **one)
    sidecar["restartPolicy"] = "Always"
    request = pod_request(pod(init=[sidecar], containers=[share_container("main", **one)]))
    assert request.share_reuse == ()
