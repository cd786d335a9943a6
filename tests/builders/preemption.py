"""A small world for victim-search tests: nodes, queues, running units charged to both the
snapshot and the usage and added to the index, and a preemptor to place."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.placement import (
    GPU_PRODUCT_LABEL,
    Placer,
    PodRequest,
    Scoring,
    Snapshot,
    default_scoring,
)
from scheduler.preemption import (
    Budget,
    NoChoice,
    PreemptionSettings,
    Preemptor,
    Running,
    RunningIndex,
    VictimChoice,
    find_victims,
)
from scheduler.quota import QuotaTree, Usage, read_queue, request_amounts
from scheduler.quota.capacity import nodes_capacity
from scheduler.quota.models import model_of_product, named_model_amounts
from tests.builders.placement import make_node, pod

GPU = "nvidia.com/gpu"
G = 1000  # one GPU in quota units


def queue(name: str, **spec: Any) -> Any:
    """A Queue spec; `min`/`max` as resource maps (`{GPU: 8}`)."""
    return read_queue({"metadata": {"name": name}, "spec": spec})


@dataclass
class World:
    """A cluster with its index and quota usage, kept consistent by `run`."""

    snapshot: Snapshot
    tree: QuotaTree
    scoring: Scoring = field(default_factory=default_scoring)
    placer: Placer = field(init=False)
    index: RunningIndex = field(init=False)
    usage: Usage = field(init=False)

    def __post_init__(self) -> None:
        self.placer = Placer(self.snapshot, self.scoring)
        self.index = RunningIndex(self.snapshot)
        self.usage = Usage(self.tree)

    def run(
        self,
        key: str,
        pods: Sequence[tuple[str, PodRequest]],
        *,
        leaf: str = "default",
        priority: int = 0,
        started: float = 0.0,
        spare: int = 0,
    ) -> Running:
        """Start unit `key`: each (node, pod) assumed there, charged to `leaf`, indexed."""
        for node, request in pods:
            self.snapshot.assume_on(request, node)
            self.usage.charge(request.key, (leaf, self.amounts(node, request)))
        unit = Running(
            key=key,
            pods=tuple(r.key for _n, r in pods),
            leaf=leaf,
            priority=priority,
            started=started,
            spare=spare,
        )
        self.index.add(unit)
        return unit

    def amounts(self, node: str, request: PodRequest) -> dict[str, int]:
        """What `request` on `node` is charged, as the runtime charges it: its plain amounts and
        the node's GPU model keys the tree names."""
        amounts = request_amounts(request)
        product = self.snapshot.node(node).labels.get(GPU_PRODUCT_LABEL, "")
        return amounts | named_model_amounts(amounts, model_of_product(product), self.tree)

    def fill(
        self,
        node: str,
        gpus: int,
        *,
        prefix: str,
        leaf: str = "default",
        priority: int = 0,
        started: float = 0.0,
    ) -> list[Running]:
        """`gpus` one-GPU pods on `node`, one unit each."""
        return [
            self.run(
                f"{prefix}-{i}",
                [(node, pod(f"ns/{prefix}-{i}", gpus=1))],
                leaf=leaf,
                priority=priority,
                started=started + i,
            )
            for i in range(gpus)
        ]

    def find(
        self,
        preemptor: Preemptor,
        settings: PreemptionSettings | None = None,
        budgets: Iterable[Budget] = (),
        capacity: Mapping[str, int] | None = None,
    ) -> VictimChoice | NoChoice:
        """The search for `preemptor`; `capacity`: the root's (default: the nodes', as no other
        scheduler runs pods here)."""
        return find_victims(
            preemptor,
            self.placer,
            self.index,
            self.tree,
            self.usage,
            tuple(budgets),
            settings or PreemptionSettings(),
            nodes_capacity(self.snapshot.nodes.values()) if capacity is None else capacity,
        )


def world(
    *names: str,
    gpus: int = 8,
    queues: Iterable[Any] = (),
    scoring: Scoring | None = None,
    products: Mapping[str, str] | None = None,
) -> World:
    """Nodes `names` of `gpus` GPUs each (`products`: node -> its `nvidia.com/gpu.product`),
    under the queue tree built from `queues`, decided with `scoring` (default: the shipped
    one)."""
    labels = products or {}
    nodes = Snapshot(
        make_node(n, gpus=gpus, labels={GPU_PRODUCT_LABEL: labels[n]} if n in labels else None)
        for n in names
    )
    return World(nodes, QuotaTree.build(queues), scoring or default_scoring())


def preemptor(
    key: str = "u",
    *,
    gpus: int = 1,
    members: int = 1,
    leaf: str = "default",
    priority: int = 10,
    **kwargs: Any,
) -> Preemptor:
    """U: `members` pods of `gpus` GPUs each (a gang when more than one)."""
    pods = tuple(pod(f"ns/{key}-{i}", gpus=gpus) for i in range(members))
    return Preemptor(key=key, pods=pods, leaf=leaf, priority=priority, **kwargs)
