"""GPU fragmentation over a typical-pod distribution, and the FGD score (Weng et al., ATC '23).

A node's *fragmentation* is the GPU capacity (milli-GPU) that the next pod, drawn from the
workload's typical-pod distribution, is expected to be unable to use:

    F(node) = Σ_t p_t · f_t(node)

For a typical pod t (per-GPU share `gpu_milli`, `gpus` GPUs, `cpu_milli`, allowed `models`):

* t asks for no GPU, or the node's GPU model is not allowed, or t does not fit (too few GPUs with
  `gpu_milli` free, or too little free CPU): every free milli-GPU of the node is a fragment for t;
* t fits: the free capacity of the GPUs that each have less than t's share free is a fragment.

*Fragmentation gradient descent* places a pod where F grows least: the score of a node is
F(before) − F(after) (milli-GPU; larger is better). For a GPU share the GPU is chosen too: the one
whose use grows F least. `paper_score` is the simulator's 0..100 form, ⌊100·σ(Δ/1000)⌋, whose
integer truncation makes many nodes tie (the paper breaks those ties uniformly at random).

The typical pods are the most frequent request shapes that together cover `coverage` (95%) of the
workload's pods, CPU-only pods included, re-normalised to sum to 1 (the published simulator's
defaults). Pure: no I/O, no randomness; results are memoised per node state in a `Fragmentation`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from agent.model import MILLI_PER_GPU

from .node import GPU_PRODUCT_LABEL, Assignment, NodeState
from .request import CPU, PodRequest

__all__ = [
    "FgdScore",
    "Fragmentation",
    "NodeView",
    "PodShape",
    "TypicalPod",
    "chosen_gpu",
    "distribution_distance",
    "node_view",
    "paper_score",
    "pod_shape",
    "typical_pods",
]

DEFAULT_COVERAGE = 0.95
_MEMO_LIMIT = 500_000
_Load = tuple[int, tuple[int, ...], tuple[int, ...]]  # cpu free, GPUs free, the same sorted

# The published simulator keeps seven buckets (Q1 lack both, Q2 lack GPU, Q3 satisfied, Q4 lack
# CPU, XL/XR CPU-only pod, no access) and sums all but Q3; summing per bucket keeps its float order.
_LACK_BOTH, _LACK_GPU, _SATISFIED, _LACK_CPU, _CPU_FITS, _CPU_LACKS, _NO_ACCESS = range(7)


@dataclass(frozen=True, slots=True, order=True)
class PodShape:
    """A pod's request as fragmentation sees it: `gpu_milli` is per GPU (1000 for whole GPUs)."""

    cpu_milli: int
    gpu_milli: int = 0
    gpus: int = 0
    models: tuple[str, ...] = ()  # sorted; empty = any model

    @classmethod
    def of(
        cls, cpu_milli: int, whole_gpus: int, gpu_share: int, models: Iterable[str] = ()
    ) -> PodShape:
        """From a request of `whole_gpus` GPUs or a `gpu_share` (< 1000) of one GPU."""
        allowed = tuple(sorted(set(models))) if models else ()
        if whole_gpus:
            return cls(cpu_milli, MILLI_PER_GPU, whole_gpus, allowed)
        if gpu_share:
            return cls(cpu_milli, gpu_share, 1, allowed)
        return cls(cpu_milli)

    @property
    def is_share(self) -> bool:
        return self.gpus == 1 and 0 < self.gpu_milli < MILLI_PER_GPU

    @property
    def total_milli(self) -> int:
        return self.gpus * self.gpu_milli

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models


@dataclass(frozen=True, slots=True)
class TypicalPod:
    shape: PodShape
    weight: float  # probability; the weights of a distribution sum to 1


@dataclass(frozen=True, slots=True)
class NodeView:
    """What fragmentation depends on: the GPU model, free CPU and free milli-GPU per GPU."""

    model: str
    cpu_free: int
    gpu_free: tuple[int, ...]


def typical_pods(
    shapes: Iterable[PodShape] | Mapping[PodShape, float], coverage: float = DEFAULT_COVERAGE
) -> tuple[TypicalPod, ...]:
    """The most frequent shapes covering `coverage` of the pods, weights re-normalised to 1.

    `shapes` lists pods, or maps shapes to (possibly fractional) counts. Ties in frequency are
    ordered by the larger shape first, so the result is deterministic.
    """
    counts: Mapping[PodShape, float] = shapes if isinstance(shapes, Mapping) else Counter(shapes)
    total = sum(counts.values())
    if total <= 0:
        return ()
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    wanted = coverage * total
    kept: list[tuple[PodShape, float]] = []
    covered = 0.0
    for shape, count in ranked:
        if covered >= wanted:
            break
        kept.append((shape, count))
        covered += count
    share = covered / total
    return tuple(TypicalPod(shape, (count / total) / share) for shape, count in kept)


def paper_score(delta: float) -> int:
    """The published simulator's FGD score: ⌊100·σ(Δ/1000)⌋ for Δ = F(before) − F(after)."""
    x = delta / MILLI_PER_GPU
    sigmoid = 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0
    return int(sigmoid * 100)


def distribution_distance(a: Sequence[TypicalPod], b: Sequence[TypicalPod]) -> float:
    """Total variation distance between two typical-pod distributions (0 same, 1 disjoint)."""
    weights: dict[PodShape, float] = {}
    for t in a:
        weights[t.shape] = weights.get(t.shape, 0.0) + t.weight
    for t in b:
        weights[t.shape] = weights.get(t.shape, 0.0) - t.weight
    return 0.5 * sum(abs(w) for w in weights.values())


def _cpu_per_milli(typical: Sequence[TypicalPod]) -> float:
    """Mean cpu (milli-cores) per milli-GPU over the typical pods that use GPUs (0 if none)."""
    gpu = sum(t.weight * t.shape.total_milli for t in typical)
    cpu = sum(t.weight * t.shape.cpu_milli for t in typical if t.shape.gpus)
    return cpu / gpu if gpu > 0 else 0.0


class Fragmentation:
    """F(node) and the FGD gradient under one typical-pod distribution, memoised per node state.

    With `cpu_aware`, F also counts the GPU capacity that cannot be used for want of cpu: a node
    needs about `cpu_per_milli` (the typical GPU pods' cpu per milli-GPU) cpu for each free
    milli-GPU, and what its free cpu cannot cover, max(0, free GPU − free cpu / cpu_per_milli),
    is stranded. FGD looks one pod ahead, so it lets cpu-only and cpu-heavy pods drain the cpu of
    GPU-dense nodes a little at a time; the stranding term makes each such step cost what it will.

    F reads a node's free cpu only through which typical pods it fits (`cpu >= need`), but for the
    stranding term. So F is kept twice: by the exact free cpu, and by the number of distinct cpu
    needs it meets (`_needs`) without the stranding term, which is added afresh (the same float
    operations in the same order as when F is computed at once). Nodes that differ only in free
    cpu mostly meet the same needs: at 40,000 nodes in `bench/scheduler_bench.py`, 10-12 % of
    the exact keys are new this way (962 of 7,964 with share pods, 648 of 6,718 without).
    """

    def __init__(self, typical: Sequence[TypicalPod], *, cpu_aware: bool = False) -> None:
        self.typical = tuple(typical)
        self.cpu_per_milli = _cpu_per_milli(self.typical) if cpu_aware else 0.0
        self._memo: dict[tuple[str, int, tuple[int, ...]], float] = {}
        self._by_needs: dict[tuple[str, int, tuple[int, ...]], tuple[float, int]] = {}
        self._needs = sorted({t.shape.cpu_milli for t in self.typical})
        self._rows = tuple(
            (
                t.shape.cpu_milli,
                t.shape.gpu_milli,
                t.shape.gpus,
                frozenset(t.shape.models),
                t.weight,
            )
            for t in self.typical
        )

    def of(self, view: NodeView) -> float:
        """F(node) in milli-GPU: the free GPU capacity the next typical pod is expected to waste."""
        return self._of(view.model, view.cpu_free, view.gpu_free)

    def _of(self, model: str, cpu_free: int, gpu_free: Sequence[int]) -> float:
        """`of(NodeView(model, cpu_free, gpu_free))`, without making the view (`placements`
        asks this of each option)."""
        return self._of_sorted(model, cpu_free, tuple(sorted(gpu_free, reverse=True)))

    def _of_sorted(self, model: str, cpu_free: int, ordered: tuple[int, ...]) -> float:
        """`_of` of GPUs already sorted, most free first (the memo's key)."""
        key = (model, cpu_free, ordered)
        found = self._memo.get(key)
        if found is not None:
            return found
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        met = (model, bisect_right(self._needs, cpu_free), ordered)
        part = self._by_needs.get(met)
        if part is None:
            if len(self._by_needs) >= _MEMO_LIMIT:
                self._by_needs.clear()
            part = self._by_needs[met] = self._unstranded(NodeView(model, cpu_free, ordered))
        fragmented, total = part
        if total and self.cpu_per_milli > 0:
            fragmented += max(0.0, total - cpu_free / self.cpu_per_milli)
        self._memo[key] = fragmented
        return fragmented

    def _unstranded(self, view: NodeView) -> tuple[float, int]:
        """(F without the stranding term, the free milli-GPU) of one node state; `view.gpu_free`
        sorted, most free first. F is 0 on a node without free GPU capacity."""
        free = view.gpu_free
        total = sum(free)
        if total == 0:
            return 0.0, 0
        buckets = [0.0] * 7
        cpu, model, count = view.cpu_free, view.model, len(free)
        for need_cpu, milli, gpus, models, weight in self._rows:
            cpu_ok = cpu >= need_cpu
            if milli == 0:
                buckets[_CPU_FITS if cpu_ok else _CPU_LACKS] += weight * total
            elif models and model not in models:
                buckets[_NO_ACCESS] += weight * total
            elif count >= gpus and free[gpus - 1] >= milli:
                if not cpu_ok:
                    buckets[_LACK_CPU] += weight * total
                    continue
                fragment = 0
                for f in reversed(free):  # ascending: stop at the first GPU with room
                    if f >= milli:
                        break
                    fragment += f
                buckets[_LACK_GPU] += weight * fragment
                buckets[_SATISFIED] += weight * (total - fragment)
            else:
                buckets[_LACK_GPU if cpu_ok else _LACK_BOTH] += weight * total
        return sum(v for i, v in enumerate(buckets) if i != _SATISFIED), total

    def gradient(self, view: NodeView, pod: PodShape) -> tuple[float, tuple[int, ...]] | None:
        """(F(before) − F(after), GPUs used) of the best placement of `pod`; None if none fits.

        The best placement grows F least; among equals, the lowest GPU index wins.
        """
        best: tuple[float, tuple[int, ...]] | None = None
        for option in self.placements(view, pod):
            if best is None or option[0] > best[0]:
                best = option
        return best

    def placements(
        self, view: NodeView, pod: PodShape, only: int | None = None
    ) -> list[tuple[float, tuple[int, ...]]]:
        """Each distinct way to place `pod` on the node, as (F(before) − F(after), GPUs used).

        Whole GPUs are the lowest-indexed free ones; a share may go on any GPU with room (one
        option per distinct free amount, lowest index first), or only on GPU `only` (of the
        view) when the placement already chose it; CPU-only pods use no GPU. Empty when the pod
        does not fit (CPU, GPU model or GPU capacity; memory is not modelled here).
        """
        free = tuple(view.gpu_free)
        load = (view.cpu_free, free, tuple(sorted(free, reverse=True)))
        return self._placements(view.model, load, pod, only)

    def node_placements(
        self, node: NodeState, pod: PodShape, only: int | None = None
    ) -> list[tuple[float, tuple[int, ...]]]:
        """`placements(node_view(node), pod, only)`, from the load the node keeps derived."""
        load = cast("_Load", node.derive("fragmentation load", _load_of))
        return self._placements(node.labels.get(GPU_PRODUCT_LABEL, ""), load, pod, only)

    def _placements(
        self, model: str, load: _Load, pod: PodShape, only: int | None
    ) -> list[tuple[float, tuple[int, ...]]]:
        """`placements` on a node of GPU model `model` with load `load`."""
        cpu_free, free, ordered = load
        if cpu_free < pod.cpu_milli or (pod.gpus and not pod.allows(model)):
            return []
        before = self._of_sorted(model, cpu_free, ordered)
        cpu_after = cpu_free - pod.cpu_milli
        if not pod.gpus:
            return [(before - self._of_sorted(model, cpu_after, ordered), ())]
        if pod.is_share and only is not None:
            taken = list(free)
            taken[only] = max(0, taken[only] - pod.gpu_milli)
            return [(before - self._of(model, cpu_after, taken), (only,))]
        if pod.is_share:
            return self._share_options(NodeView(model, cpu_free, free), pod, before, cpu_after)
        chosen = [i for i, f in enumerate(free) if f >= MILLI_PER_GPU][: pod.gpus]
        if len(chosen) < pod.gpus:
            return []
        if ordered[0] == MILLI_PER_GPU:  # the GPUs taken lead `ordered` and end it as zeros
            after = ordered[pod.gpus :] + (0,) * pod.gpus
        else:
            left = (0 if i in chosen else f for i, f in enumerate(free))
            after = tuple(sorted(left, reverse=True))
        return [(before - self._of_sorted(model, cpu_after, after), tuple(chosen))]

    def _share_options(
        self, view: NodeView, pod: PodShape, before: float, cpu_after: int
    ) -> list[tuple[float, tuple[int, ...]]]:
        options: list[tuple[float, tuple[int, ...]]] = []
        tried: set[int] = set()
        for index, free in enumerate(view.gpu_free):
            if free < pod.gpu_milli or free in tried:
                continue
            tried.add(free)
            after = list(view.gpu_free)
            after[index] = free - pod.gpu_milli
            delta = before - self._of(view.model, cpu_after, after)
            options.append((delta, (index,)))
        return options


# -- placement score functions (`ScoreFn`: pod, node before the pod, assignment -> 0..100) -------


def node_view(node: NodeState) -> NodeView:
    """A placement node as fragmentation sees it (MIG-enabled GPUs left out)."""
    cpu_free, free, _ordered = cast("_Load", node.derive("fragmentation load", _load_of))
    return NodeView(node.labels.get(GPU_PRODUCT_LABEL, ""), cpu_free, free)


def _load_of(node: NodeState) -> _Load:
    """What fragmentation reads of a node's load: its free cpu, free milli-GPU per GPU (MIG-enabled
    GPUs left out) and the same sorted, most free first (the memo's key)."""
    if True in node.gpu_mig:
        free = tuple(f for g, f in enumerate(node.gpu_free) if not node.gpu_mig[g])
    else:
        free = tuple(node.gpu_free)
    return node.free(CPU), free, tuple(sorted(free, reverse=True))


def chosen_gpu(pod: PodRequest, node: NodeState, assignment: Assignment) -> int | None:
    """The view index (MIG GPUs left out) of the GPU a runtime share (DESIGN §12) takes: its
    score is that GPU's, as the placement already chose it. None for every other pod."""
    if not pod.shares or len(assignment.shares) != 1:
        return None
    g = assignment.shares[0].gpu
    return g - sum(node.gpu_mig[:g])


def pod_shape(pod: PodRequest, assignment: Assignment | None = None) -> PodShape:
    """The pod's shape; with `assignment`, a pod placing shares (DESIGN §12) is one share of
    their milli on that node."""
    if assignment is not None and assignment.shares and not pod.gpu_milli:
        milli = min(MILLI_PER_GPU - 1, assignment.share_milli)
        return PodShape.of(pod.cpu_milli, 0, milli, pod.gpu_models)
    return PodShape.of(pod.cpu_milli, pod.gpus, pod.gpu_milli, pod.gpu_models)


class FgdScore:
    """The published FGD score as a `ScoreFn`: ⌊100·σ(Δ/1000)⌋ for the best GPU choice.

    `share_gpu` gives that choice for a GPU share (the GPU with the highest score, lowest index
    among equals), which can differ from the filter's fullest-GPU choice.
    """

    def __init__(self, fragmentation: Fragmentation) -> None:
        self.fragmentation = fragmentation

    def __call__(self, pod: PodRequest, node: NodeState, assignment: Assignment) -> float:
        only = chosen_gpu(pod, node, assignment)
        shape = pod_shape(pod, assignment)
        options = self.fragmentation.node_placements(node, shape, only)
        return float(max(paper_score(d) for d, _gpus in options)) if options else 0.0

    def share_gpu(self, pod: PodRequest, node: NodeState) -> int | None:
        best: tuple[int, int] | None = None
        for delta, gpus in self.fragmentation.placements(node_view(node), pod_shape(pod)):
            score = paper_score(delta)
            if gpus and (best is None or score > best[0]):
                best = (score, gpus[0])
        return None if best is None else best[1]
