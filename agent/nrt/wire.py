"""The NodeResourceTopology (topology.node.k8s.io/v1alpha2) wire vocabulary gputopo writes and
reads: the resource's group, version, kind and plural; zone types and names; attribute names; the
schema version; and the GPU-to-GPU cost encoding. Each name is defined here once, for the encoder,
the decoder and the Kubernetes clients. GPU health is spelled with the model's `HEALTHY` /
`UNHEALTHY`, which the kubelet's device-plugin API spells the same way.

GPU zone costs: `100 - k` for a pair joined by k NVLinks, else `100 + NVML topology level`
(PIX 110, PXB 120, PHB 130, NODE 140, SYS 150): lower is closer, and the cost decodes back to the
`nvidia-smi topo -m` cell without loss.
"""

from __future__ import annotations

from functools import cache

from agent.model import GpuLink, TopoLevel

GROUP = "topology.node.k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeResourceTopology"
PLURAL = "noderesourcetopologies"
SCHEMA_VERSION = "v1"

ZONE_NODE = "Node"
ZONE_GPU = "GPU"
NODE_PREFIX = "node-"
GPU_PREFIX = "gpu-"

# Top-level attributes.
ATTR_POLICY = "topologyManagerPolicy"
ATTR_SCOPE = "topologyManagerScope"
ATTR_FINGERPRINT = "nodeTopologyPodsFingerprint"
ATTR_FINGERPRINT_METHOD = "nodeTopologyPodsFingerprintMethod"
ATTR_SCHEMA = "gputopo.io/schema"
ATTR_DRIVER = "gputopo.io/driverVersion"
ATTR_CUDA = "gputopo.io/cudaDriverVersion"
ATTR_FABRIC = "gputopo.io/nvlinkFabric"
ATTR_ISLANDS = "gputopo.io/nvlinkIslands"
ATTR_SOURCE = "gputopo.io/allocationSource"
ATTR_GPU_COUNT = "gputopo.io/gpuCount"  # physical GPUs
ATTR_GPUS_FREE = "gputopo.io/gpusFree"  # whole GPUs (not in MIG mode) with nothing allocated
ATTR_MIG_GPUS = "gputopo.io/migGpus"  # GPUs in MIG mode: requested by slice, never whole
ATTR_CLIQUE = "gputopo.io/nvlinkClique"  # the nvidia.com/gpu.clique value; only when it has one

# Attributes of a Node (NUMA) zone.
NODE_ATTR_CPUS = "cpus"

# Attributes of a GPU zone.
GPU_ATTR_UUID = "uuid"
GPU_ATTR_PCI_BUS_ID = "pciBusId"
GPU_ATTR_PRODUCT = "product"
GPU_ATTR_MEMORY_MIB = "memoryMiB"
GPU_ATTR_COMPUTE_CAPABILITY = "computeCapability"
GPU_ATTR_MINOR = "minor"
GPU_ATTR_MIG_MODE = "migMode"
GPU_ATTR_MIG_LAYOUT = "migLayout"
GPU_ATTR_MIG_DEVICES = "migDevices"
GPU_ATTR_NVLINK_ISLAND = "nvlinkIsland"
GPU_ATTR_HEALTH = "health"
GPU_ATTR_SHARING = "sharing"  # none | timeSlicing | mps (agent.shares.Sharing)
GPU_ATTR_SHARES = "shares"  # replicas a shared GPU is split into (only on shared GPUs)
GPU_ATTR_SHARE_PODS = "sharePods"  # each share container's use (agent.share_pods; when any)
GPU_ATTR_CLIQUE = "clique"  # the node's NVLink clique, on the GPUs attached to it (DESIGN §13)
# What the GPU really uses (issue 47): memoryUsedMiB, smPercent, powerW, measuredAt, named in
# agent.gpu_load (its codec), which the codec here and the scheduler import.

NVLINK_COST_BASE = 100

_LEGACY_POLICY = {
    "single-numa-node": "SingleNUMANode",
    "restricted": "Restricted",
    "best-effort": "BestEffort",
}


def node_zone_name(numa_id: int) -> str:
    return f"{NODE_PREFIX}{numa_id}"


def gpu_zone_name(index: int) -> str:
    return f"{GPU_PREFIX}{index}"


def legacy_topology_policy(policy: str, scope: str) -> str:
    """The deprecated `topologyPolicies` value (`SingleNUMANodePodLevel`, `None`, ...)."""
    base = _LEGACY_POLICY.get(policy)
    if base is None:
        return "None"
    return base + ("PodLevel" if scope == "pod" else "ContainerLevel")


def gpu_cost(link: GpuLink) -> int:
    """The cost of a GPU zone to another GPU zone joined by `link`."""
    if link.nvlinks:
        return NVLINK_COST_BASE - link.nvlinks
    return NVLINK_COST_BASE + int(link.level)


@cache
def link_of_cost(cost: int) -> GpuLink:
    """Inverse of `gpu_cost`; raises ValueError for values no GpuLink encodes to. One object per
    cost: the link matrices of nodes decoded apart then compare cell by cell as the same objects
    (the claims' verdicts and placement's classes compare every node's matrix with others')."""
    if 0 < cost < NVLINK_COST_BASE:
        return GpuLink(nvlinks=NVLINK_COST_BASE - cost)
    level = cost - NVLINK_COST_BASE
    if level in {lv.value for lv in TopoLevel} and level != TopoLevel.INTERNAL:
        return GpuLink(level=TopoLevel(level))
    raise ValueError(f"not a gputopo GPU cost: {cost} (expected 1..99 or 110/120/130/140/150)")
