"""The runtime tells its scoring which pods wait (`Scoring.queued`, `Scoring.dequeued`), as the
simulator does: with `pending_share` set, the learned typical pods count the queue."""

from __future__ import annotations

from scheduler.placement.fgd import PodShape
from scheduler.placement.fragscores import FragmentationScore
from tests.builders.scheduler import create_pod, gpu_node, node_of, pod_body, running, wait_for

EIGHT = PodShape(0, 1000, 8)


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
