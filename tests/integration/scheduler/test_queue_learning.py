"""The runtime tells its scoring which pods wait (`Scoring.queued`, `Scoring.dequeued`), as the
simulator does: with `pending_share` set, the learned typical pods count the queue. And which
of its pods were bound before it started (`Scoring.seen`): they count as history."""

from __future__ import annotations

import pytest

from scheduler.placement.fgd import PodShape
from scheduler.placement.fragscores import FragmentationScore
from tests.builders.scheduler import create_pod, gpu_node, node_of, pod_body, running, wait_for

EIGHT = PodShape(0, 1000, 8)
FOUR = PodShape(0, 1000, 4)
TWO = PodShape(0, 1000, 2)


def test_a_waiting_pod_weighs_in_the_typical_pods(fake_api, core_v1, monkeypatch):
    monkeypatch.setattr(FragmentationScore, "pending_share", 0.5)
    gpu_node(fake_api, "n1", gpus=4)
    with running(fake_api) as rt:
        learner = next(
            f for f in rt.scheduler.scoring.learners() if isinstance(f, FragmentationScore)
        )
        prior = {t.shape: t.weight for t in learner.fragmentation.typical}[EIGHT]
        create_pod(core_v1, pod_body("big", gpus=8))  # fits nowhere: it waits
        create_pod(core_v1, pod_body("small", gpus=1))  # scored after "big" is queued
        wait_for(lambda: node_of(fake_api, "small"), 5, "small bound")
        weights = {t.shape: t.weight for t in learner.fragmentation.typical}
    # half the mixture is the waiting pods (one or both 8-GPU); without the queue the 8-GPU
    # shape keeps about its prior weight (16/7 of 16 prior pods, and "big" once seen)
    assert prior < 0.15
    assert weights[EIGHT] > 0.3


def test_pods_bound_before_the_scheduler_started_are_learned(fake_api, core_v1):
    for n in range(9):
        gpu_node(fake_api, f"n{n}", gpus=8)
    for i in range(16):  # what ran before a restart: sixteen 4-GPU pods of ours
        create_pod(core_v1, pod_body(f"ran-{i}", gpus=4, node=f"n{i // 2}"))
    create_pod(core_v1, pod_body("theirs", gpus=2, node="n8", scheduler="default-scheduler"))
    with running(fake_api) as rt:
        learner = next(
            f for f in rt.scheduler.scoring.learners() if isinstance(f, FragmentationScore)
        )
        create_pod(core_v1, pod_body("small", gpus=1))  # its scoring applies the due refit
        wait_for(lambda: node_of(fake_api, "small"), 5, "small bound")
        weights = {t.shape: t.weight for t in learner.fragmentation.typical}
    # the prior (16 pods, 16/7 per shape) and the 16 pods of ours; the other scheduler's not
    assert weights[FOUR] == pytest.approx((16 / 7 + 16) / 32)
    assert weights[TWO] == pytest.approx((16 / 7) / 32)
