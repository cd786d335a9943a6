"""A tree of CompositePodGroups tried once on a live cache (any tree, cluster and load, as
Hypothesis draws them): what is placed satisfies the root or is nothing; each PodGroup gets its
minCount or none; every group with a topology constraint lands in one domain; no node holds more
GPUs than it has; and nothing is left assumed but what was placed (a tree undone leaves no
trace). `_broken` names each invariant an attempt broke."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes import client

from agent.objkey import ObjectKey
from scheduler.kubeapi.client import KubeClient
from scheduler.placement import Tree, default_scoring
from scheduler.runtime.cluster.cache import ClusterCache
from scheduler.runtime.cluster.composite import composite_key
from scheduler.runtime.cluster.groups import group_key
from scheduler.runtime.gangs.tracker import Binds
from scheduler.runtime.loop import Scheduler
from scheduler.runtime.metrics import SchedulerMetrics
from scheduler.runtime.pending import SchedulingQueue, UnitKey, UnitKind
from scheduler.runtime.reporter import Reporter
from tests.builders.nodes import bound_pod, node_obj
from tests.builders.workloads import child_podgroup, composite_podgroup, member_pod

RACK = "gputopo.io/rack"


class _Standby:
    """A fence that never leads: the reporter writes nothing (no API server is there)."""

    def may_bind(self) -> bool:
        return False


def _scheduler(cache: ClusterCache) -> Scheduler:
    unreachable = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    kube = KubeClient(unreachable, "gputopo-scheduler", "tree-properties")
    metrics = SchedulerMetrics("test", leading=lambda: False)
    fence = _Standby()
    reporter = Reporter(kube, fence, metrics)
    queue = SchedulingQueue(time.monotonic)
    return Scheduler(kube, cache, queue, default_scoring(), metrics, reporter, fence)


@dataclass
class _Drawn:
    nodes: list[tuple[str, int, str]]  # name, GPUs, rack
    fillers: list[tuple[str, int]]  # node, GPUs held by a foreign pod
    bodies: list[dict[str, Any]] = field(default_factory=list)  # groups, then composites
    pods: dict[str, tuple[str, int]] = field(default_factory=dict)  # pod -> (group, GPUs)


def _topology() -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from([{}, {"schedulingConstraints": {"topology": [{"key": RACK}]}}])


@st.composite
def _trees(draw: st.DrawFn) -> _Drawn:
    nodes = [
        (f"n{i}", draw(st.sampled_from((2, 4, 8))), f"r{draw(st.integers(1, 3))}")
        for i in range(draw(st.integers(1, 6)))
    ]
    fillers = [
        (name, draw(st.integers(1, gpus)))
        for name, gpus, _ in nodes
        if draw(st.booleans()) and draw(st.booleans())
    ]
    drawn = _Drawn(nodes, fillers)
    counter = [0]

    def group(parent: str) -> None:
        counter[0] += 1
        name = f"g{counter[0]}"
        size = draw(st.integers(1, 3))
        body = child_podgroup(name, draw(st.integers(1, size)), parent, **draw(_topology()))
        drawn.bodies.append(body)
        for i in range(size):
            drawn.pods[f"{name}-{i}"] = (name, draw(st.integers(1, 4)))

    def composite(name: str, parent: str | None, depth: int) -> None:
        children = draw(st.integers(1, 3))
        gang = draw(st.booleans())
        body = composite_podgroup(
            name,
            draw(st.integers(1, children)) if gang else None,
            parent=parent,
            topology=RACK if draw(st.booleans()) and draw(st.booleans()) else None,
        )
        drawn.bodies.append(body)
        for i in range(children):
            if depth < 2 and draw(st.booleans()) and draw(st.booleans()):
                composite(f"{name}-c{i}", name, depth + 1)
            else:
                group(name)

    composite("root", None, 1)
    return drawn


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=_trees())
def test_a_tree_is_placed_whole_within_its_domains_or_not_at_all(drawn: _Drawn) -> None:
    cache = ClusterCache("gputopo-scheduler")
    scheduler = _scheduler(cache)
    try:
        for name, gpus, rack in drawn.nodes:
            body = node_obj(name, gpus=gpus)
            body["metadata"]["labels"][RACK] = rack
            cache.upsert_node(body)
        for i, (node, gpus) in enumerate(drawn.fillers):
            cache.upsert_pod(bound_pod(f"filler-{i}", node, gpus))
        for body in drawn.bodies:
            if body["kind"] == "CompositePodGroup":
                scheduler.gangs.on_composite("ADDED", body)
            else:
                scheduler.gangs.on_group("ADDED", body, upstream=True)
        for pod, (group, gpus) in drawn.pods.items():
            obj = member_pod(pod, group, gpus=gpus)
            obj["metadata"]["uid"] = f"uid-{pod}"
            cache.upsert_pod(obj)
        placed: Binds = []
        root = composite_key("default", "root")
        scheduler.gangs.attempt(UnitKey(UnitKind.GANG, root), lambda _, binds: placed.extend(binds))
        assert _broken(drawn, cache, root, {info.key: a.node for info, a in placed}) == []
        whole = cache.tree_group(root)
        inner = whole is not None and whole.tree is not None and whole.tree.inner_topology()
        event(f"placed {'some' if placed else 'none'}, topology below the root: {inner}")
    finally:
        scheduler.close()


def _broken(
    drawn: _Drawn, cache: ClusterCache, root: ObjectKey, placed: dict[ObjectKey, str]
) -> list[str]:
    """The invariants the attempt broke (none: [])."""
    tree = cache.tree_group(root)
    if tree is None or tree.tree is None:
        return [f"no tree: {tree}"]
    broken = []
    per_group = Counter(str(cache.pods[k].group_key) for k in placed)
    if placed and not tree.tree.satisfied(lambda k: per_group[k]):
        broken.append(f"placed without satisfying the root: {dict(per_group)}")
    for body in drawn.bodies:
        if body["kind"] == "PodGroup":
            key = group_key("default", body["metadata"]["name"], upstream=True)
            need = body["spec"]["schedulingPolicy"]["gang"]["minCount"]
            if 0 < per_group[key] < need:
                broken.append(f"{key}: {per_group[key]} placed, minCount {need}")
    racks = {name: rack for name, _, rack in drawn.nodes}
    for level in _walk(tree.tree):
        if level.topology is not None:
            inside = set(level.leaves())
            used = {racks[n] for k, n in placed.items() if cache.pods[k].group_key in inside}
            if len(used) > 1:
                broken.append(f"{level.key} spans racks {sorted(used)}")
    gpus = {name: count for name, count, _ in drawn.nodes}
    held = Counter[str]()
    for name, count in drawn.fillers:
        held[name] += count
    for key, name in placed.items():
        held[name] += drawn.pods[key.partition("/")[2]][1]
    broken += [f"{n}: {held[n]} GPUs of {gpus[n]}" for n in held if held[n] > gpus[n]]
    assumed = {k for k, info in cache.pods.items() if info.assumed}
    if assumed != set(placed):
        broken.append(f"left assumed: {sorted(assumed - set(placed))}")
    return broken


def _walk(node: Tree) -> list[Tree]:
    return [node, *(n for c in node.children for n in _walk(c))]
