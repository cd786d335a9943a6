"""Verdicts that fit, kept by what the filters and the shipped scores read of a node.

`VerdictMemo` keeps a pod class's verdicts per node *state*: equal static shape, GPU product
label and load. A bind mostly makes a state no node was in, and every class that looks at the
node next filters and scores it again, although most of what differs between two states is
read by no filter or score of that class: the memory and pod slots requested (the pre-check
each class passed checks them as the filter does), and on a node with shared GPUs what the share
pods leave of a GPU's memory, compute and replicas. At 40,000 nodes some 80 % of the verdicts of
such pods repeated one made for another state with the same reads (`bench/scheduler_bench.py`,
20,000 single pods: 13,100 nodes filtered and scored with this memo, 36,600 without).

`ReadVerdicts` keys a verdict that fits by the pod's class without its memory and the number of
what its filters and scores read of the node (`_node_reads`), for the pods and nodes where that
is all they read:

* the pod asks no share containers and no MIG devices and its class reads no labels but the
  GPU product's (a node selector or affinity reads labels the state does not hold);
* the scoring is shipped (its scores read `score_reads` of a pod and `gpu_pod_node_reads` of a
  node with GPUs; a pod's memory only for a pod without GPUs, and not even then when the scoring
  is `memory_blind_on_gpu_nodes`, which a pod without GPUs needs here, on a node with GPUs);
* the node's topology policy is not `single-numa-node` (NUMA zones' headroom is read there),
  none of its GPUs is MIG-enabled (free MIG devices) and its GPUs are not shared as
  `nvidia.com/gpu` (a whole-GPU request is placed as equal splits of their replicas there).

What the filters read then is the static shape (taints, allocatable, GPUs and links), the GPU
product label, the free cpu, memory and pod slots (the pre-check's, exactly), the free amount of
every other resource the pod asks (`nvidia.com/gpu` and extended ones), each GPU's free
milli-GPU (whole GPUs come from the idle ones), and for a `gpu_milli` pod on a node with shared
GPUs whether each has a replica and the memory its share takes (`legacy_rooms`: not how much
is left of either); the used tier reads the milli-GPU in use
and MIG devices in use. The scores read `gpu_pod_node_reads` (free cpu, free milli-GPU per GPU,
MIG devices in use and held) and the static shape and label. Each is in the key.

A verdict that does not fit is not kept here (its reasons are the state's own). The caller
drops every verdict when what the learners know changes (a score changed). Not thread-safe.
"""

from __future__ import annotations

from agent.resource_names import GPU_RESOURCE

from .class_verdicts import Verdict, pod_class
from .node import GPU_PRODUCT_LABEL, NodeState, TopologyPolicy
from .request import CPU, MEMORY, PODS, PodRequest
from .scores import gpu_pod_node_reads
from .shares import legacy_rooms

__all__ = ["ReadVerdicts"]

_LIMIT = 1 << 18  # verdicts (and numbers) kept before every table starts afresh
_BITS = 32  # a key: node-reads number << _BITS | the pod's number
_VIEW_BITS = 8  # a node-reads cache key: state id << _VIEW_BITS | the pod's view number
_CHECKED = frozenset((PODS, CPU, MEMORY))  # resources the pre-check checks as the filter does


class ReadVerdicts:
    """Verdicts that fit, by (pod class without memory, what its filters and scores read)."""

    def __init__(self, *, memory_blind: bool) -> None:
        """`memory_blind`: the scoring is `memory_blind_on_gpu_nodes` (pods without GPUs are
        kept only then); the caller makes one only for a shipped scoring."""
        self._memory_blind = memory_blind
        self._verdicts: dict[int, Verdict] = {}
        self._numbers: dict[object, int] = {}
        self._node_numbers: dict[int, int] = {}  # state << _VIEW_BITS | view -> reads number
        self._plain: dict[int, bool] = {}  # static shape id -> the node's reads are all here
        self._pod: PodRequest | None = None  # the last pod keyed, its numbers and its view
        self._pod_number = -1
        self._view = -1
        self._extras: tuple[str, ...] = ()
        self._milli = 0  # the last pod's `gpu_milli`

    def clear(self) -> None:
        """What the learners know changed: every verdict is stale."""
        self._verdicts.clear()

    def key(self, pod: PodRequest, state: int, shape: int, node: NodeState) -> int | None:
        """The key of `pod`'s verdict on `node` (in state `state`, of static shape `shape`;
        the pod passed its class's pre-check there and its class reads no labels), or None
        where more than the key is read (module docstring)."""
        if pod is not self._pod:
            self._take(pod)
        if self._pod_number < 0:
            return None
        plain = self._plain.get(shape)
        if plain is None:
            plain = self._plain[shape] = _plain_node(node)
        if not plain or (not pod.wants_gpu and not node.gpu_count):
            return None
        cached = state << _VIEW_BITS | self._view
        reads = self._node_numbers.get(cached)
        if reads is None:
            reads = self._node_numbers[cached] = self._number(self._node_reads(shape, node))
        return reads << _BITS | self._pod_number

    def get(self, key: int) -> Verdict | None:
        return self._verdicts.get(key)

    def keep(self, key: int, verdict: Verdict) -> None:
        """Keep `verdict` under `key` when it fits."""
        if verdict[0]:
            if len(self._verdicts) >= _LIMIT:
                self._verdicts.clear()
            self._verdicts[key] = verdict

    def _take(self, pod: PodRequest) -> None:
        """Number `pod` (-1 when its verdicts are not kept here) and its view of a node."""
        self._pod_number = -1
        if len(self._numbers) >= _LIMIT or len(self._node_numbers) >= _LIMIT:
            self._restart()
        self._pod = pod
        if pod.shares or pod.mig or (not pod.wants_gpu and not self._memory_blind):
            return
        self._extras = tuple(name for name, _qty in pod.vector if name not in _CHECKED)
        self._milli = pod.gpu_milli
        view = self._number(("view", self._extras, self._milli))
        if view >= 1 << _VIEW_BITS:  # many views: numbers afresh (a view is a handful)
            self._restart()
            self._pod = pod
            view = self._number(("view", self._extras, self._milli))
        self._view = view
        self._pod_number = self._number(("pod", pod_class(pod, memory=False)))

    def _node_reads(self, shape: int, node: NodeState) -> tuple[object, ...]:
        """What the filters and scores of the pod last taken read of `node` (module docstring)."""
        shared: tuple[bool, ...] = ()
        if self._milli and node.share_resource is not None:
            shared = legacy_rooms(node, self._milli)
        return (
            shape,
            node.labels.get(GPU_PRODUCT_LABEL),
            node.derive("gpu pod scores", gpu_pod_node_reads),
            node.used_milli,
            tuple(node.free(name) for name in self._extras),
            shared,
        )

    def _number(self, key: object) -> int:
        found = self._numbers.get(key)
        if found is None:
            found = self._numbers[key] = len(self._numbers)
        return found

    def _restart(self) -> None:
        """Every table afresh, numbers from 0 again (the last pod is numbered again)."""
        self._verdicts.clear()
        self._numbers.clear()
        self._node_numbers.clear()
        self._pod = None


def _plain_node(node: NodeState) -> bool:
    """What the module docstring's key holds is all the filters read of `node` (static)."""
    return (
        node.topology_policy is not TopologyPolicy.SINGLE_NUMA_NODE
        and True not in node.gpu_mig
        and node.share_resource != GPU_RESOURCE  # (whole GPUs are splits of its replicas)
    )
