"""Hypothesis: shares and whole-GPU pods arrive and leave on nodes with some GPUs shared; no
GPU's shares exceed its memory, compute or replicas, no shared GPU serves a whole-GPU pod, and
every node's incremental per-GPU view equals one rebuilt from its pods."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agent.resource_names import GPU_RESOURCE
from agent.shares import SHARED_GPU_RESOURCE, ContainerShare
from scheduler.placement import NodeState, Placer, PodRequest, Snapshot, default_scoring
from scheduler.placement.shares import share_groups
from tests.builders.placement import GIB, make_node, pod, share, share_pod, shared_node

SIZES = st.sampled_from([None, 4 * GIB, 10 * GIB, 20 * GIB, 40 * GIB, 79 * GIB])
COMPUTE = st.sampled_from([None, None, 10, 30, 60, 100])


def rebuilt(node: NodeState) -> NodeState:
    """The node from its static shape alone, every pod charged again."""
    fresh = NodeState(
        name=node.name,
        allocatable=node.allocatable,
        gpu_numa=node.gpu_numa,
        gpu_mig=node.gpu_mig,
        links=node.links,
        gpu_slots=node.gpu_slots,
        gpu_memory=node.gpu_memory,
        share_resource=node.share_resource,
    )
    for request, assignment in node.pods.values():
        fresh.add_pod(request, assignment)
    return fresh


class Shares(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        nodes = [
            shared_node("mixed", shared=2, whole=2, slots=4),
            shared_node("ts", shared=2, slots=3, resource=GPU_RESOURCE),
            shared_node("mps", shared=1, slots=8, gpu_memory=40 * GIB),
            make_node("whole", gpus=2),
        ]
        self.snapshot = Snapshot(nodes)
        self.placer = Placer(self.snapshot, default_scoring())
        self.running: list[PodRequest] = []
        self.count = 0

    def _place(self, request: PodRequest) -> None:
        decision = self.placer.decide(request, explain=False)
        if decision.assignment is not None:
            self.snapshot.assume(request, decision.assignment)
            self.running.append(request)

    @rule(memory=SIZES, compute=COMPUTE, containers=st.integers(1, 2), renamed=st.booleans())
    def share_arrives(self, memory, compute, containers, renamed):
        self.count += 1
        resource = SHARED_GPU_RESOURCE if renamed else GPU_RESOURCE
        asks = [
            share(f"c{i}", memory=memory, compute=compute, resource=resource)
            for i in range(containers)
        ]
        self._place(share_pod(f"default/s{self.count}", *asks))

    @rule(init=SIZES, init_compute=COMPUTE, memory=SIZES, compute=COMPUTE)
    def share_after_an_init_container_arrives(self, init, init_compute, memory, compute):
        """An init container's replica taken again by the app container (`share_reuse`)."""
        self.count += 1
        first = share("init", memory=init, compute=init_compute, init=True)
        app = share("main", memory=memory, compute=compute)
        request = replace(share_pod(f"default/i{self.count}", first, app), share_reuse=(0, 0))
        self._place(request)

    @rule(gpus=st.integers(1, 3))
    def whole_arrives(self, gpus):
        self.count += 1
        split = (ContainerShare(container="c", init=False, resource=GPU_RESOURCE, replicas=gpus),)
        self._place(pod(f"default/w{self.count}", gpus=gpus, split=split))

    @rule(data=st.data())
    def one_leaves(self, data):
        if self.running:
            gone = self.running.pop(data.draw(st.integers(0, len(self.running) - 1)))
            self.snapshot.forget(gone.key)

    @invariant()
    def no_gpu_is_overbooked(self):
        for node in self.snapshot.nodes.values():
            asked = {  # per replica group, on its first holder: the most a member asks
                (p.key, p.shares[members[0]].container): max(
                    p.shares[i].compute_percent or 0 for i in members
                )
                for p, _a in node.pods.values()
                for members in share_groups(p, p.shares)
            }
            for g, slots in enumerate(node.gpu_slots):
                on = [(p.key, s) for p, a in node.pods.values() for s in a.shares if s.gpu == g]
                used = [s for _key, s in on]
                if slots:
                    assert sum(s.slots for s in used) <= slots
                    assert sum(s.memory for s in used) <= node.gpu_memory[g]
                    assert sum(s.compute for s in used) <= 100
                    # what the containers asked, not only what was charged: the agent limits that
                    assert sum(asked.get((key, s.container), 0) for key, s in on) <= 100
                    assert not any(g in a.gpus for _p, a in node.pods.values())
                else:
                    assert not used

    @invariant()
    def the_view_equals_one_rebuilt_from_pods(self):
        for node in self.snapshot.nodes.values():
            fresh = rebuilt(node)
            assert (fresh.slots_free, fresh.memory_free, fresh.compute_free) == (
                node.slots_free,
                node.memory_free,
                node.compute_free,
            )
            assert (fresh.gpu_free, fresh.used_milli, fresh.idle_mask) == (
                node.gpu_free,
                node.used_milli,
                node.idle_mask,
            )


Shares.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestShares = Shares.TestCase
