"""The claim views a pod is decided on are kept between pods (a pod costs no view per node) and
made again when what they are built from changes: a node's slices, its labels, the slices that
serve it by label. A refused pod is told the nearest misses and how many others there are."""

from __future__ import annotations

from scheduler.placement import Placer, default_scoring
from scheduler.runtime.claims.book import CLAIMS, CLASSES, SLICES, ClaimBook
from scheduler.runtime.claims.placing import ClaimCharges, ClaimPlacement, ClaimRefusal
from scheduler.runtime.cluster.cache import ClusterCache
from tests.builders.claims import (
    claim_obj,
    class_obj,
    island_devices,
    request,
    shared_slice_obj,
    slice_obj,
)
from tests.builders.claims import two_islands as islands_inventory
from tests.builders.nodes import node_obj
from tests.builders.nrt import make_nrt
from tests.builders.pods import container, pod


class Cluster:
    """A live cache and claim book with nodes n1 and n2, or `names` (8 GPUs each, by NRT), no
    slices yet."""

    def __init__(self, names: tuple[str, ...] = ("n1", "n2")) -> None:
        self.cache = ClusterCache("gputopo-scheduler")
        self.book = ClaimBook()
        self.charges = ClaimCharges(self.book, self.cache)
        self.placer = Placer(self.cache.snapshot, default_scoring())
        self.book.replace(CLASSES, [class_obj()])
        for name in names:
            self.cache.upsert_node(node_obj(name, gpus=8))
            self.cache.upsert_nrt(make_nrt(name, islands_inventory()))
        self.made = 0

    def place(self, gpus: int) -> ClaimPlacement | ClaimRefusal:
        """A new pod whose claim asks `gpus` GPUs, decided and assumed."""
        self.made += 1
        name = f"p{self.made}"
        self.book.apply(CLAIMS, "ADDED", claim_obj(f"{name}-gpus", request("gpus", gpus)))
        body = pod(name, containers=[container(limits={"cpu": "1"})])
        body["metadata"].update(uid=f"uid-{name}", namespace="ns")
        body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
        info = self.cache.upsert_pod(body)[1]
        return self.charges.place(self.placer, info, None)


def test_a_node_whose_slice_arrives_after_pods_were_decided_is_used() -> None:
    """n2 publishes no devices until two pods were decided; the next pod that needs a whole
    node's GPUs goes to n2 (a view of n2 kept from before would have none)."""
    cluster = Cluster()
    cluster.book.apply(SLICES, "ADDED", slice_obj("n1", island_devices()))
    first = cluster.place(8)
    assert isinstance(first, ClaimPlacement)
    assert first.assignment.node == "n1"
    assert isinstance(cluster.place(8), ClaimRefusal)
    cluster.book.apply(SLICES, "ADDED", slice_obj("n2", island_devices()))
    third = cluster.place(8)
    assert isinstance(third, ClaimPlacement)
    assert third.assignment.node == "n2"


def test_a_node_relabelled_into_a_shared_slice_is_served_by_it() -> None:
    """GPUs published for the nodes labelled rack=a, and no node so labelled: a pod waits; once
    n2 is labelled rack=a, the next pod gets one of those GPUs on n2."""
    cluster = Cluster()
    rack = shared_slice_obj("rack-a", "rack-a", island_devices(), label=("rack", "a"))
    cluster.book.apply(SLICES, "ADDED", rack)
    assert isinstance(cluster.place(1), ClaimRefusal)
    relabelled = node_obj("n2", gpus=8)
    relabelled["metadata"]["labels"]["rack"] = "a"
    changed, problem = cluster.cache.upsert_node(relabelled)
    assert (changed, problem) == (True, None)
    placed = cluster.place(1)
    assert isinstance(placed, ClaimPlacement)
    assert placed.assignment.node == "n2"
    devices = placed.decision.claims[0].allocation.devices
    assert [(d.id.pool, d.id.device) for d in devices] == [("rack-a", "gpu-0")]


def test_a_refused_pod_is_told_the_three_nearest_misses_and_how_many_more() -> None:
    """Five nodes of 8 GPUs, pods asking 9: each pod's message names its own claim on the three
    first nodes (all miss alike) and counts the other two."""
    names = ("n1", "n2", "n3", "n4", "n5")
    cluster = Cluster(names)
    cluster.book.replace(SLICES, [slice_obj(name, island_devices()) for name in names])
    for made in (1, 2):
        refused = cluster.place(9)
        assert isinstance(refused, ClaimRefusal)
        selector = 'device.driver == "gpu.gputopo.io" && device.attributes["gpu.gputopo.io"].type'
        miss = (
            f"claim ns/p{made}-gpus request gpus: 8 of 9 devices match class gpu.gputopo.io's"
            f' selector `{selector} == "gpu"` on node'
        )
        shown = "; ".join(f"{miss} {name}" for name in names[:3])
        assert refused.message == (
            f"0/5 nodes are available: claims do not fit: {shown} (and 2 more)"
        )
