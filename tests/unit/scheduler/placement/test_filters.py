"""Each filter of DESIGN §7, with the stock scheduler's reason strings."""

from __future__ import annotations

import pytest

from scheduler.placement import (
    Assignment,
    Effect,
    GpuShare,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Operator,
    Taint,
    Toleration,
    TopologyPolicy,
    filter_node,
)
from tests.builders.placement import GIB, H100, make_node, pod

NOT_READY = Taint(key="node.kubernetes.io/not-ready", effect=Effect.NO_SCHEDULE)
GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect=Effect.NO_SCHEDULE)


def term(*reqs: NodeSelectorRequirement) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=reqs)


def req(key: str, op: Operator, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=op, values=values)


LABELS = {"zone": "a", "gen": "9", "gputopo.io/rack": "r1"}


@pytest.mark.parametrize(
    ("node_kwargs", "pod_kwargs", "reasons"),
    [
        pytest.param({}, {}, (), id="fits"),
        pytest.param({"unschedulable": True}, {}, ("node(s) were unschedulable",), id="cordoned"),
        pytest.param(
            {"unschedulable": True},
            {
                "tolerations": (
                    Toleration(key="node.kubernetes.io/unschedulable", operator="Exists"),
                )
            },
            (),
            id="cordoned, tolerated",
        ),
        pytest.param(
            {"taints": (NOT_READY,)},
            {},
            ("node(s) had untolerated taint {node.kubernetes.io/not-ready: }",),
            id="not-ready taint",
        ),
        pytest.param(
            {"taints": (GPU_TAINT,)},
            {},
            ("node(s) had untolerated taint {nvidia.com/gpu: present}",),
            id="gpu taint with value",
        ),
        pytest.param(
            {"taints": (GPU_TAINT,)},
            {"tolerations": (Toleration(key="nvidia.com/gpu", value="present"),)},
            (),
            id="equal toleration",
        ),
        pytest.param(
            {"taints": (GPU_TAINT,)},
            {"tolerations": (Toleration(key="nvidia.com/gpu", value="other"),)},
            ("node(s) had untolerated taint {nvidia.com/gpu: present}",),
            id="equal toleration, wrong value",
        ),
        pytest.param(
            {"taints": (GPU_TAINT,)},
            {"tolerations": (Toleration(operator="Exists"),)},
            (),
            id="tolerate everything",
        ),
        pytest.param(
            {"taints": (GPU_TAINT,)},
            {
                "tolerations": (
                    Toleration(key="nvidia.com/gpu", operator="Exists", effect=Effect.NO_EXECUTE),
                )
            },
            ("node(s) had untolerated taint {nvidia.com/gpu: present}",),
            id="toleration for another effect",
        ),
        pytest.param(
            {"taints": (Taint(key="soft", effect=Effect.PREFER_NO_SCHEDULE),)},
            {},
            (),
            id="PreferNoSchedule does not filter",
        ),
    ],
)
def test_unschedulable_and_taints(node_kwargs, pod_kwargs, reasons):
    fit = filter_node(pod(**pod_kwargs), make_node(**node_kwargs))
    assert fit.reasons == reasons
    assert (fit.assignment is None) == bool(reasons)


AFFINITY_MISS = ("node(s) didn't match Pod's node affinity/selector",)


@pytest.mark.parametrize(
    ("pod_kwargs", "reasons"),
    [
        pytest.param({"node_selector": {"zone": "a"}}, (), id="selector match"),
        pytest.param({"node_selector": {"zone": "b"}}, AFFINITY_MISS, id="selector miss"),
        pytest.param({"node_selector": {"missing": "x"}}, AFFINITY_MISS, id="selector absent key"),
        pytest.param({"affinity": (term(req("zone", Operator.IN, "a", "b")),)}, (), id="In"),
        pytest.param(
            {"affinity": (term(req("zone", Operator.IN, "c")),)}, AFFINITY_MISS, id="In miss"
        ),
        pytest.param({"affinity": (term(req("zone", Operator.NOT_IN, "c")),)}, (), id="NotIn"),
        pytest.param(
            {"affinity": (term(req("zone", Operator.NOT_IN, "a")),)}, AFFINITY_MISS, id="NotIn miss"
        ),
        pytest.param(
            {"affinity": (term(req("nope", Operator.NOT_IN, "a")),)}, (), id="NotIn absent"
        ),
        pytest.param({"affinity": (term(req("zone", Operator.EXISTS)),)}, (), id="Exists"),
        pytest.param(
            {"affinity": (term(req("nope", Operator.EXISTS)),)}, AFFINITY_MISS, id="Exists miss"
        ),
        pytest.param({"affinity": (term(req("nope", Operator.DOES_NOT_EXIST)),)}, (), id="DNE"),
        pytest.param(
            {"affinity": (term(req("zone", Operator.DOES_NOT_EXIST)),)},
            AFFINITY_MISS,
            id="DNE miss",
        ),
        pytest.param({"affinity": (term(req("gen", Operator.GT, "8")),)}, (), id="Gt"),
        pytest.param(
            {"affinity": (term(req("gen", Operator.GT, "9")),)}, AFFINITY_MISS, id="Gt miss"
        ),
        pytest.param({"affinity": (term(req("gen", Operator.LT, "10")),)}, (), id="Lt"),
        pytest.param(
            {"affinity": (term(req("zone", Operator.LT, "10")),)},
            AFFINITY_MISS,
            id="Lt non-integer",
        ),
        pytest.param(
            {
                "affinity": (
                    term(req("zone", Operator.IN, "x")),
                    term(req("gputopo.io/rack", Operator.IN, "r1")),
                )
            },
            (),
            id="terms are ORed",
        ),
        pytest.param(
            {"affinity": (term(req("zone", Operator.IN, "a"), req("gen", Operator.IN, "8")),)},
            AFFINITY_MISS,
            id="expressions are ANDed",
        ),
        pytest.param({"affinity": (term(),)}, AFFINITY_MISS, id="empty term matches nothing"),
    ],
)
def test_node_selector_and_affinity(pod_kwargs, reasons):
    assert filter_node(pod(**pod_kwargs), make_node(labels=LABELS)).reasons == reasons


@pytest.mark.parametrize(
    ("pod_kwargs", "reasons"),
    [
        pytest.param({"cpu_milli": 64_000}, (), id="cpu exactly fits"),
        pytest.param({"cpu_milli": 64_001}, ("Insufficient cpu",), id="cpu"),
        pytest.param({"memory": 513 * GIB}, ("Insufficient memory",), id="memory"),
        pytest.param(
            {"cpu_milli": 70_000, "memory": 600 * GIB},
            ("Insufficient cpu", "Insufficient memory"),
            id="cpu and memory",
        ),
        pytest.param({"gpus": 9}, ("Insufficient nvidia.com/gpu",), id="gpus over allocatable"),
        pytest.param(
            {"ephemeral_storage": 101 * GIB}, ("Insufficient ephemeral-storage",), id="eph"
        ),
        pytest.param(
            {"hugepages": {"hugepages-2Mi": GIB}}, ("Insufficient hugepages-2Mi",), id="hugepages"
        ),
        pytest.param(
            {"extended": {"example.com/fpga": 1}}, ("Insufficient example.com/fpga",), id="ext"
        ),
        pytest.param(
            {"mig": {"1g.10gb": 1}}, ("Insufficient nvidia.com/mig-1g.10gb",), id="no MIG"
        ),
    ],
)
def test_resources(pod_kwargs, reasons):
    assert filter_node(pod(**pod_kwargs), make_node()).reasons == reasons


def test_too_many_pods():
    node = make_node(max_pods=1)
    node.add_pod(pod("default/first"), Assignment(node=node.name))
    assert filter_node(pod("default/second"), node).reasons == ("Too many pods",)


def test_gpu_counter_fits_but_shares_hold_every_gpu():
    node = make_node(gpus=2)
    node.add_pod(
        pod("default/s0", gpu_milli=500),
        Assignment(node=node.name, shares=(GpuShare(gpu=0, milli=500),)),
    )
    node.add_pod(
        pod("default/s1", gpu_milli=500),
        Assignment(node=node.name, shares=(GpuShare(gpu=1, milli=500),)),
    )
    fit = filter_node(pod(gpus=1), node)
    assert fit.reasons == ("Insufficient nvidia.com/gpu",)


@pytest.mark.parametrize(
    ("models", "reasons"),
    [
        pytest.param(frozenset(), (), id="any model"),
        pytest.param(frozenset({H100}), (), id="allowed"),
        pytest.param(
            frozenset({"NVIDIA-A100-SXM4-80GB"}),
            ("node(s) didn't match Pod's GPU model",),
            id="other",
        ),
    ],
)
def test_gpu_model(models, reasons):
    assert filter_node(pod(gpus=1, gpu_models=models), make_node()).reasons == reasons


@pytest.mark.parametrize(
    ("operator", "names", "labels", "fits"),
    [
        pytest.param(Operator.IN, ("node-a",), {}, True, id="In its name"),
        pytest.param(Operator.IN, ("node-b",), {}, False, id="In another name"),
        pytest.param(Operator.NOT_IN, ("node-b",), {}, True, id="NotIn another name"),
        pytest.param(Operator.IN, ("node-a",), {"pool": "x"}, False, id="its name, not its label"),
    ],
)
def test_match_fields_read_the_nodes_name_beside_its_labels(operator, names, labels, fits):
    named = NodeSelectorRequirement(key="metadata.name", operator=operator, values=names)
    pool = NodeSelectorRequirement(key="pool", operator=Operator.IN, values=("y",))
    term = NodeSelectorTerm(match_expressions=(pool,), match_fields=(named,))
    node = make_node("node-a", labels={"pool": "y", **labels})
    result = filter_node(pod(affinity=(term,)), node)
    assert (result.assignment is not None) is fits
    if not fits:
        assert result.reasons == ("node(s) didn't match Pod's node affinity/selector",)


# -- devices and NUMA ---------------------------------------------------------------------------
def test_whole_gpus_get_the_best_set():
    fit = filter_node(pod(gpus=2), make_node(preset="pairs"))
    assert fit.assignment is not None
    assert fit.assignment.gpus == (0, 1)


def test_share_goes_to_the_fullest_gpu_that_fits():
    node = make_node(gpus=4)
    node.add_pod(
        pod("default/a", gpu_milli=300),
        Assignment(node=node.name, shares=(GpuShare(gpu=2, milli=300),)),
    )
    node.add_pod(
        pod("default/b", gpu_milli=700),
        Assignment(node=node.name, shares=(GpuShare(gpu=3, milli=700),)),
    )
    fit = filter_node(pod(gpu_milli=600), node)
    assert fit.assignment is not None
    assert fit.assignment.shares == (GpuShare(gpu=2, milli=600),)
    fit_small = filter_node(pod(gpu_milli=300), node)
    assert fit_small.assignment is not None
    assert fit_small.assignment.shares == (GpuShare(gpu=3, milli=300),)


def test_mig_devices_pack_onto_busy_gpu():
    node = make_node(gpus=2, mig={0: {"1g.10gb": 7}, 1: {"1g.10gb": 7}})
    node.add_pod(
        pod("default/m", mig={"1g.10gb": 1}),
        Assignment(node=node.name, mig=((1, "1g.10gb"),)),
    )
    fit = filter_node(pod(mig={"1g.10gb": 2}), node)
    assert fit.assignment is not None
    assert fit.assignment.mig == ((0, "1g.10gb"), (1, "1g.10gb"))
    single = filter_node(pod(mig={"1g.10gb": 1}), node)
    assert single.assignment is not None
    assert single.assignment.mig == ((1, "1g.10gb"),)


def test_mig_gpu_is_not_a_whole_gpu():
    node = make_node(gpus=2, mig={0: {"3g.40gb": 2}})
    assert filter_node(pod(gpus=1), node).assignment is not None
    assert filter_node(pod(gpus=2), node).reasons == ("Insufficient nvidia.com/gpu",)


@pytest.mark.parametrize(
    ("policy", "gpus", "expected_numa", "reasons"),
    [
        pytest.param(TopologyPolicy.NONE, 6, None, (), id="policy none: spans NUMA"),
        pytest.param(TopologyPolicy.SINGLE_NUMA_NODE, 4, 0, (), id="fits NUMA 0"),
        pytest.param(
            TopologyPolicy.SINGLE_NUMA_NODE,
            6,
            None,
            ("node(s) cannot align the pod to one NUMA node (single-numa-node)",),
            id="6 GPUs cannot align",
        ),
    ],
)
def test_single_numa_node_gpus(policy, gpus, expected_numa, reasons):
    fit = filter_node(pod(gpus=gpus), make_node(policy=policy))
    assert fit.reasons == reasons
    if not reasons:
        assert fit.assignment is not None
        assert fit.assignment.numa == expected_numa


def test_single_numa_node_moves_to_the_numa_with_room():
    node = make_node(policy=TopologyPolicy.SINGLE_NUMA_NODE)
    node.add_pod(pod("default/x", gpus=2), Assignment(node=node.name, gpus=(0, 1)))
    fit = filter_node(pod(gpus=3), node)
    assert fit.assignment is not None
    assert fit.assignment.numa == 1
    assert fit.assignment.gpus == (4, 5, 6)


def test_single_numa_node_checks_cpu_of_guaranteed_pods():
    node = make_node(policy=TopologyPolicy.SINGLE_NUMA_NODE, numa_cpu=8_000)
    assert filter_node(pod(gpus=1, cpu_milli=8_000, guaranteed=True), node).assignment is not None
    fit = filter_node(pod(gpus=1, cpu_milli=9_000, guaranteed=True), node)
    assert fit.reasons == ("node(s) cannot align the pod to one NUMA node (single-numa-node)",)
    # Burstable pods are not NUMA-checked for cpu (as NodeResourceTopologyMatch).
    assert filter_node(pod(gpus=1, cpu_milli=9_000), node).assignment is not None


def test_numa_cpu_is_charged_and_released():
    node = make_node(policy=TopologyPolicy.SINGLE_NUMA_NODE, numa_cpu=8_000)
    big = pod("default/g", gpus=1, cpu_milli=6_000, guaranteed=True)
    fit = filter_node(big, node)
    assert fit.assignment is not None
    assert fit.assignment.numa == 0
    node.add_pod(big, fit.assignment)
    assert node.numa_free is not None
    assert node.numa_free[0]["cpu"] == 2_000
    second = filter_node(pod("default/h", gpus=1, cpu_milli=6_000, guaranteed=True), node)
    assert second.assignment is not None
    assert second.assignment.numa == 1
    node.remove_pod(big.key)
    assert node.numa_free[0]["cpu"] == 8_000
