from __future__ import annotations

import pytest

from scheduler.placement.request import Effect, HostPort, NodeSelectorRequirement, Operator
from scheduler.runtime.cluster.podspec import (
    claim_names,
    is_guaranteed,
    pod_group_name,
    pod_request,
    pod_requests,
    volume_problem,
)
from tests.builders.pods import container, pod


@pytest.mark.parametrize(
    ("containers", "init", "overhead", "expected"),
    [
        pytest.param(
            [
                container(requests={"cpu": "500m", "memory": "1Gi"}),
                container("b", requests={"cpu": "1.5"}),
            ],
            None,
            None,
            {"cpu": 2000, "memory": 2**30},
            id="sum of app containers",
        ),
        pytest.param(
            [container(requests={"cpu": "1"})],
            [container("i", requests={"cpu": "3"})],
            None,
            {"cpu": 3000},
            id="a bigger init container wins",
        ),
        pytest.param(
            [container(requests={"cpu": "1"})],
            [
                container("side", requests={"cpu": "1"}, restart_policy="Always"),
                container("i", requests={"cpu": "2"}),
            ],
            None,
            {"cpu": 3000},
            id="sidecar adds to the init container after it",
        ),
        pytest.param(
            [container(requests={"cpu": "3"})],
            [container("side", requests={"cpu": "1"}, restart_policy="Always")],
            None,
            {"cpu": 4000},
            id="sidecar adds to app containers",
        ),
        pytest.param(
            [container(limits={"nvidia.com/gpu": 2})],
            None,
            None,
            {"nvidia.com/gpu": 2},
            id="limit without request counts",
        ),
        pytest.param(
            [container(requests={"cpu": "100m"})],
            None,
            {"cpu": "250m", "memory": "120Mi"},
            {"cpu": 350, "memory": 120 * 2**20},
            id="overhead added",
        ),
        pytest.param(
            [container(requests={"cpu": "1m", "memory": "1.5"})],
            None,
            None,
            {"cpu": 1, "memory": 2},
            id="rounded up like Value()",
        ),
    ],
)
def test_pod_requests_match_the_stock_scheduler(containers, init, overhead, expected):
    body = pod(containers=containers, init=init)
    if overhead:
        body["spec"]["overhead"] = overhead
    assert pod_requests(body) == expected


def _pod_level(requests: dict[str, object], overhead: dict[str, str] | None = None) -> dict:
    body = pod(
        containers=[
            container(requests={"cpu": "500m", "memory": "1Gi"}, limits={"nvidia.com/gpu": 2}),
            container("b", requests={"cpu": "250m", "memory": "1Gi"}),
        ],
        init=[container("i", requests={"cpu": "4"})],
    )
    body["spec"]["resources"] = {"requests": requests, "limits": {"cpu": "64"}}
    if overhead:
        body["spec"]["overhead"] = overhead
    return body


@pytest.mark.parametrize(
    ("requests", "overhead", "expected"),
    [
        pytest.param(
            {"cpu": "6", "memory": "8Gi"},
            None,
            {"cpu": 6000, "memory": 8 * 2**30, "nvidia.com/gpu": 2},
            id="pod-level cpu and memory replace the containers' (init included); GPUs stay",
        ),
        pytest.param(
            {"cpu": "6"},
            None,
            {"cpu": 6000, "memory": 2 * 2**30, "nvidia.com/gpu": 2},
            id="what the pod level leaves out is the containers'",
        ),
        pytest.param(
            {"memory": "4Gi", "hugepages-2Mi": "64Mi"},
            {"cpu": "100m", "memory": "1Gi"},
            {"cpu": 4100, "memory": 5 * 2**30, "hugepages-2Mi": 64 * 2**20, "nvidia.com/gpu": 2},
            id="overhead added on top, hugepages read",
        ),
        pytest.param(
            {},
            None,
            {"cpu": 4000, "memory": 2 * 2**30, "nvidia.com/gpu": 2},
            id="pod-level limits alone are not read",
        ),
    ],
)
def test_pod_level_requests_stand_for_the_containers_as_upstream(requests, overhead, expected):
    assert pod_requests(_pod_level(requests, overhead)) == expected


def test_a_bad_pod_level_quantity_names_the_field():
    with pytest.raises(ValueError, match=r"spec.resources.requests\[memory\]"):
        pod_requests(_pod_level({"memory": "much"}))


def test_bad_quantity_names_the_field():
    body = pod(containers=[container(requests={"cpu": "lots"})])
    with pytest.raises(ValueError, match=r"spec.containers\[0\].resources.requests\[cpu\]"):
        pod_requests(body)


def _pinned(*fields: dict[str, object]) -> dict[str, object]:
    required = {"nodeSelectorTerms": [{"matchFields": list(fields)}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def test_required_node_affinity_match_fields_are_read():
    """The DaemonSet controller's form: one term pinning the pod to its node by name."""
    field = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    (term,) = pod_request(pod(affinity=_pinned(field))).affinity
    assert term.match_expressions == ()
    assert term.match_fields == (
        NodeSelectorRequirement(key="metadata.name", operator=Operator.IN, values=("n1",)),
    )


@pytest.mark.parametrize(
    ("field", "named"),
    [
        pytest.param(
            {"key": "metadata.labels", "operator": "In", "values": ["x"]}, r"\[0\]\.key", id="key"
        ),
        pytest.param(
            {"key": "metadata.name", "operator": "Exists"}, r"\[0\]\.operator", id="operator"
        ),
    ],
)
def test_a_match_field_the_api_server_would_refuse_names_the_field(field, named):
    with pytest.raises(ValueError, match=r"nodeSelectorTerms\[0\]\.matchFields" + named):
        pod_request(pod(affinity=_pinned(field)))


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        pytest.param({"operator": "Exists"}, r"\[0\]\.key: want a non-empty string", id="no key"),
        pytest.param({"key": "zone", "operator": "Near"}, r"\[0\]\.operator: 'Near'", id="op"),
        pytest.param(
            {"key": "zone", "operator": "In", "values": "a"}, r"\[0\]\.values", id="values"
        ),
    ],
)
def test_a_malformed_node_affinity_expression_names_the_field(expression, named):
    required = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    with pytest.raises(ValueError, match=r"nodeSelectorTerms\[0\]\.matchExpressions" + named):
        pod_request(pod(affinity=affinity))


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        pytest.param(
            [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]}],
            None,
            (HostPort(port=8080),),
            id="TCP on every address by default",
        ),
        pytest.param(
            [
                {
                    "name": "a",
                    "ports": [
                        {"containerPort": 53, "hostPort": 53, "protocol": "UDP"},
                        {"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.5"},
                        {"containerPort": 81, "hostPort": 81, "hostIP": "::"},
                        {"containerPort": 9000},
                    ],
                }
            ],
            None,
            (
                HostPort(port=53, protocol="UDP"),
                HostPort(port=80, ip="10.0.0.5"),
                HostPort(port=81),
            ),
            id="protocol, one address, an unspecified one, a container port alone",
        ),
        pytest.param(
            [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 80}]}],
            [
                {"name": "side", "restartPolicy": "Always", "ports": [{"hostPort": 9100}]},
                {"name": "once", "ports": [{"hostPort": 9200}]},
            ],
            (HostPort(port=9100), HostPort(port=80)),
            id="a sidecar's port counts, an init container's does not",
        ),
    ],
)
def test_host_ports_are_read_as_node_ports_reads_them(containers, init, expected):
    assert pod_request(pod(containers=containers, init=init)).host_ports == expected


def test_a_bad_host_port_names_the_field():
    body = pod(containers=[{"name": "a", "ports": [{"hostPort": 70000}]}])
    with pytest.raises(ValueError, match=r"spec.containers\[0\].ports\[0\].hostPort: 70000"):
        pod_request(body)


def test_volume_problems():
    body = pod(
        volumes=[
            {"name": "data", "persistentVolumeClaim": {"claimName": "c1"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
        ]
    )
    assert claim_names(body) == ["c1", "p-scratch"]
    bound = {"spec": {"volumeName": "pv-1"}}
    wffc = {"spec": {"storageClassName": "local"}}
    modes = {"local": "WaitForFirstConsumer", "fast": "Immediate"}
    assert volume_problem(body, {"c1": bound, "p-scratch": bound}, modes) is None
    assert volume_problem(body, {"c1": bound, "p-scratch": wffc}, modes) == (
        "unsupported: unbound WaitForFirstConsumer volume"
    )
    assert (
        volume_problem(body, {"c1": bound}, modes) == 'persistentvolumeclaim "p-scratch" not found'
    )
    immediate = {"spec": {"storageClassName": "fast"}}
    assert "unbound immediate" in str(
        volume_problem(body, {"c1": immediate, "p-scratch": bound}, modes)
    )


def test_pod_request_translation():
    body = pod(
        "train-0",
        "ml",
        containers=[
            container(
                requests={
                    "cpu": "2",
                    "memory": "4Gi",
                    "hugepages-2Mi": "1Gi",
                    "example.com/nic": 1,
                },
                limits={"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb.me": 1},
            )
        ],
        labels={"pod-group.scheduling.sigs.k8s.io": "train"},
        nodeSelector={"nvidia.com/gpu.product": "H100"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "gputopo.io/rack", "operator": "In", "values": ["r1"]}
                            ]
                        }
                    ]
                }
            }
        },
        priority=100,
    )
    req = pod_request(body)
    assert (req.key, req.cpu_milli, req.memory, req.gpus) == ("ml/train-0", 2000, 4 * 2**30, 4)
    assert dict(req.mig) == {"1g.10gb+me": 1}
    assert dict(req.hugepages) == {"hugepages-2Mi": 2**30}
    assert dict(req.extended) == {"example.com/nic": 1}
    assert req.pod_group == "train"
    assert req.priority == 100
    assert req.tolerations[0].effect is Effect.NO_SCHEDULE
    assert req.affinity[0].match_expressions[0].operator is Operator.IN
    assert not req.guaranteed


def test_malformed_pod_is_a_value_error_naming_the_pod():
    body = pod("bad", containers=[container(requests={"cpu": "x"})])
    with pytest.raises(ValueError, match=r"pod default/bad: .*cpu"):
        pod_request(body)


def test_guaranteed_and_groups():
    g = pod(
        containers=[
            container(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
        ]
    )
    burstable = pod(
        containers=[container(requests={"cpu": "1"}, limits={"cpu": "2", "memory": "1Gi"})]
    )
    assert is_guaranteed(g)
    assert not is_guaranteed(burstable)
    assert pod_group_name(pod(labels={"scheduling.x-k8s.io/pod-group": "a"})) == "a"
    assert pod_group_name(pod()) is None
