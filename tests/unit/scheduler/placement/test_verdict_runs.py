"""The memo's best node per class comes from a rebuild's sorted run, read from a moving front, and
the entries pushed since on a heap (`Verdicts`): many classes packing the same nodes leave most
of a run stale, refits rescore every class, and nodes come and go. Every decision is still
`pick`'s, on seeded clusters and pod mixes, and the run's front is seen to move past stale
entries (the path is taken, not only allowed)."""

from __future__ import annotations

import random

import pytest

from scheduler.placement import Assignment, PodRequest, Scoring
from scheduler.placement.class_verdicts import Verdicts
from scheduler.placement.fragscores import FragmentationScore
from scheduler.placement.node_slots import IntArray
from scheduler.placement.pick import pick
from scheduler.placement.scores import DEFAULT_WEIGHTS
from scheduler.placement.verdict_memo import VerdictMemo
from scheduler.sim.cluster import Cluster, NodeSpec

GIB = 1 << 30


class WatchedMemo(VerdictMemo):
    """The memo, noting how far each class's run front moved before a rebuild."""

    skipped = 0

    def _best(
        self, pod: PodRequest, verdicts: Verdicts, where: IntArray | None
    ) -> tuple[Assignment, float] | None:
        run, before = verdicts.run, verdicts.at
        found = super()._best(pod, verdicts, where)
        if verdicts.run is run:  # not rebuilt: the front moved over stale entries only
            self.skipped += verdicts.at - before
        return found


def mixed_pod(rng: random.Random, key: str) -> PodRequest:
    """Pods of a dozen classes that all pack the same nodes (the shipped scoring's order)."""
    cpu, memory = rng.choice((1000, 4000)), rng.choice((4, 16)) * GIB
    kind = rng.random()
    if kind < 0.15:
        return PodRequest(key=key, cpu_milli=cpu, memory=memory)
    if kind < 0.35:
        return PodRequest(key=key, cpu_milli=cpu, memory=memory, gpu_milli=rng.choice((250, 500)))
    return PodRequest(key=key, cpu_milli=cpu, memory=memory, gpus=rng.choice((1, 1, 2, 4)))


def placed_as_pick(memo: VerdictMemo, cluster: Cluster, scoring: Scoring, pod: PodRequest) -> bool:
    """`memo` decides `pod` as `pick` does (node, devices, score); bound there when it fits."""
    got = memo.decide(pod, explain=False)
    expected = pick(pod, cluster.snapshot, scoring, explain=False)
    assert (got.assignment, got.score) == (expected.assignment, expected.score)
    if got.assignment is None:
        return False
    cluster.bind(pod, got.assignment)
    return True


def refitting(every: int) -> tuple[Scoring, FragmentationScore]:
    """The shipped weights, their fragmentation score refitted every `every` pods at most."""
    scoring = Scoring.from_weights(DEFAULT_WEIGHTS, candidate_limit=0)
    learner = scoring.learners()[0]
    assert isinstance(learner, FragmentationScore)
    learner.refit_tolerance, learner.max_refit = 0.0, every
    return scoring, learner


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("top", [1, 3, 16])
def test_stale_run_entries_are_skipped_and_decisions_stay_picks(seed: int, top: int):
    rng = random.Random(seed)
    sizes = [rng.choice((0, 4, 8)) for _ in range(60)]
    cluster = Cluster.from_specs(
        NodeSpec(name=f"n{i:03d}", gpus=gpus, cpu_milli=64_000) for i, gpus in enumerate(sizes)
    )
    scoring, learner = refitting(every=32)
    memo = WatchedMemo(cluster.snapshot, scoring, heap_top=top)
    bound: list[str] = []
    for k in range(400):
        pod = mixed_pod(rng, f"default/p{k}")
        if placed_as_pick(memo, cluster, scoring, pod):
            bound.append(pod.key)
        if len(bound) > 150 or (bound and rng.random() < 0.1):
            cluster.unbind(bound.pop(rng.randrange(len(bound))))
        if k % 97 == 96:  # a node replaced by a smaller one, then one removed
            cluster.add_spec(NodeSpec(name=f"n{rng.randrange(60):03d}", gpus=2))
            cluster.remove_node(rng.choice(sorted(cluster.snapshot.nodes)))
    assert learner.version >= 4
    if top > 1:
        assert memo.skipped > 0
