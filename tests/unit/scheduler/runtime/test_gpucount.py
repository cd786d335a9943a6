"""GPUs by model, kind and state, and fragmented GPUs, as the scheduler's cache sees them."""

from __future__ import annotations

from dataclasses import replace

from agent.nrt import decode
from scheduler.placement import Assignment
from scheduler.placement.gpushare import GpuShare
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.gpucount import UNKNOWN_MODEL, count_gpus
from tests.builders.nodes import bound_pod, node_obj
from tests.builders.nrt import make_nrt
from tests.builders.placement import H100, make_node, pod
from tests.builders.topology import dgx_h100, gpu_uuid

NRT_MODEL = "NVIDIA H100 80GB HBM3"


def test_a_node_with_an_nrt_counts_its_gpus_by_the_nrts_model():
    nrt = make_nrt("n1", dgx_h100(), {("default", "foreign"): [gpu_uuid(5), gpu_uuid(6)]})
    cache = ClusterCache("gputopo-scheduler")
    cache.upsert_node(node_obj("n1"))
    cache.upsert_nrt(nrt)
    cache.upsert_pod(bound_pod("foreign", "n1", 2))
    counts = count_gpus(cache.snapshot.nodes, cache.nrts)
    assert counts.gpus == {(NRT_MODEL, "whole", "allocated"): 2, (NRT_MODEL, "whole", "free"): 6}
    assert counts.fragmented == {NRT_MODEL: 0}


def test_an_unhealthy_gpu_in_the_nrt_is_counted_as_unhealthy():
    decoded = decode(make_nrt("n1", dgx_h100()))
    gpus = list(decoded.availability.gpus)
    gpus[3] = replace(gpus[3], healthy=False)
    nrt = replace(decoded, availability=replace(decoded.availability, gpus=tuple(gpus)))
    counts = count_gpus({"n1": make_node("n1")}, {"n1": nrt})
    assert counts.gpus == {(NRT_MODEL, "whole", "unhealthy"): 1, (NRT_MODEL, "whole", "free"): 7}


def test_without_an_nrt_the_model_is_the_nodes_label_or_unknown():
    labelled = make_node("a", gpus=2)
    bare = make_node("b", gpus=1)
    bare.labels = {}
    counts = count_gpus({"a": labelled, "b": bare}, {})
    assert counts.gpus == {(H100, "whole", "free"): 2, (UNKNOWN_MODEL, "whole", "free"): 1}
    assert counts.fragmented == {H100: 0, UNKNOWN_MODEL: 0}


def test_partly_taken_gpus_are_shares_or_mig_and_fragmented():
    node = make_node("n", gpus=4, mig={2: {"1g.10gb": 7}, 3: {"1g.10gb": 7}})
    node.add_pod(
        pod("default/half", gpu_milli=500),
        Assignment(node="n", shares=(GpuShare(gpu=0, milli=500),)),
    )
    node.add_pod(pod("default/whole", gpus=1), Assignment(node="n", gpus=(1,)))
    node.add_pod(
        pod("default/slice", mig={"1g.10gb": 1}), Assignment(node="n", mig=((2, "1g.10gb"),))
    )
    counts = count_gpus({"n": node}, {})
    assert counts.gpus == {
        (H100, "share", "allocated"): 1,
        (H100, "whole", "allocated"): 1,
        (H100, "mig", "allocated"): 1,
        (H100, "mig", "free"): 1,
    }
    assert counts.fragmented == {H100: 2}  # the half-used GPU and the MIG GPU with room left
