"""The queues as the scheduler runtime sees them (DESIGN §10): the Queue and ElasticQuota objects,
the tree built from them, what each queue uses and the root's capacity.

Usage is charged from pods (`charge`: bound or assumed, not finished, scheduled by gputopo), so a
new leader counts the same as the old one. The root's capacity is the allocatable of the known
nodes minus what other schedulers' pods there request, each shared GPU counted once (DESIGN §12:
the kubelet's allocatable counts the replicas of a plain `nvidia.com/gpu`, and a renamed one not
at all; `set_shared`, `scheduler.quota.capacity`). The decisions themselves (admission, order,
fair share) are the pure functions of `scheduler.quota`. Callers hold `cache.lock`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.objkey import ObjectKey, key_of
from scheduler.placement import GPU_PRODUCT_LABEL, GpuShare, NodeState
from scheduler.quota import (
    ROOT,
    Amounts,
    QueueSpec,
    QuotaTree,
    Usage,
    add_into,
    allocatable_amounts,
    read_elastic_quota,
    read_queue,
    request_amounts,
    resolve_queue,
)
from scheduler.quota.capacity import shared_gpu_fix
from scheduler.quota.modelfilter import ModelNodes
from scheduler.quota.models import model_amounts, model_of_product, named_model_amounts
from scheduler.runtime.cluster.podinfo import PodInfo

__all__ = ["QueueBook"]

Obj = Mapping[str, Any]
QUEUES, ELASTIC_QUOTAS = "queues", "elasticquotas"


class QueueBook:
    def __init__(self) -> None:
        self.queue_objs: dict[str, Obj] = {}
        self.quota_objs: dict[ObjectKey, Obj] = {}
        self.tree = QuotaTree.build([])
        self.usage = Usage(self.tree)
        self._foreign = Usage(self.tree)  # other schedulers' pods, charged to the root only
        self._allocatable: dict[str, dict[str, int]] = {}
        self._total: dict[str, int] = {}
        self._model: dict[str, str] = {}  # node -> its GPU model (DESIGN §10 "Per GPU model")
        self._shared: dict[str, dict[str, int]] = {}  # node -> what set_shared added
        self._model_nodes: ModelNodes | None = None  # built from `_model` when asked

    # -- queue objects ---------------------------------------------------------------------
    def apply(self, kind: str, etype: str, obj: Obj) -> bool:
        """A Queue or ElasticQuota event; True when the tree changed (usage must be recharged)."""
        if kind == QUEUES:
            name = str((obj.get("metadata") or {}).get("name") or "")
            _store(self.queue_objs, name, etype, obj)
        else:
            _store(self.quota_objs, key_of(obj), etype, obj)
        return self._rebuild()

    def replace(self, kind: str, items: list[dict[str, Any]]) -> bool:
        """A full list of Queues or ElasticQuotas; True when the tree changed."""
        if kind == QUEUES:
            self.queue_objs = {str((o.get("metadata") or {}).get("name") or ""): o for o in items}
        else:
            self.quota_objs = {key_of(o): o for o in items}
        return self._rebuild()

    def _rebuild(self) -> bool:
        specs: list[QueueSpec] = [read_queue(o) for _, o in sorted(self.queue_objs.items())]
        specs += [read_elastic_quota(o) for _, o in sorted(self.quota_objs.items())]
        tree = QuotaTree.build(specs)
        if tree.specs == self.tree.specs and tree.problems == self.tree.problems:
            return False
        self.tree = tree
        return True

    def object_of(self, name: str) -> tuple[str, Obj] | None:
        """(kind, object) behind queue `name` (None for the implicit root and default)."""
        if name in self.queue_objs:
            return "Queue", self.queue_objs[name]
        for obj in self.quota_objs.values():
            if read_elastic_quota(obj).name == name:
                return "ElasticQuota", obj
        return None

    # -- pods ------------------------------------------------------------------------------
    def resolve(self, info: PodInfo, group: Obj | None) -> tuple[str, str | None]:
        """The pod's leaf queue and why it must wait whatever it asks (None: it may be tried)."""
        labels = (info.obj.get("metadata") or {}).get("labels") or {}
        group_labels = ((group or {}).get("metadata") or {}).get("labels") or {}
        return resolve_queue(self.tree, info.namespace, labels, group_labels)

    def charge(
        self,
        key: ObjectKey,
        info: PodInfo | None,
        group: Obj | None,
        shares: Sequence[GpuShare] = (),
    ) -> None:
        """Charge the pod as it is now (nothing when gone, finished or not on a node);
        `shares`: where its GPU shares are on its node."""
        if info is None or not info.counted:
            self.usage.charge(key, None)
            self._foreign.charge(key, None)
        elif info.ours:
            leaf, _ = self.resolve(info, group)
            self.usage.charge(key, (leaf, self._amounts(info, shares)))
            self._foreign.charge(key, None)
        else:
            self.usage.charge(key, None)
            self._foreign.charge(key, (ROOT, self._amounts(info, shares)))

    def _amounts(self, info: PodInfo, shares: Sequence[GpuShare]) -> dict[str, int]:
        """The pod's request and its claims' shares, plus its GPUs under its node's model key
        when the tree names it."""
        amounts = request_amounts(info.request, shares, info.claim_shares)
        return amounts | self.on_model(amounts, self._model.get(info.node or "", ""))

    def on_model(self, amounts: Amounts, model: str) -> dict[str, int]:
        """The model keys the tree names that `amounts` adds on a node of `model`."""
        return named_model_amounts(amounts, model, self.tree)

    # -- models ----------------------------------------------------------------------------
    def model_of(self, node: str) -> str:
        """The GPU model of `node` (\"\" when it has none or is unknown)."""
        return self._model.get(node, "")

    def nodes_by_model(self) -> dict[str, set[str]]:
        """Known nodes grouped by their GPU model (nodes without one left out)."""
        out: dict[str, set[str]] = {}
        for node, model in self._model.items():
            out.setdefault(model, set()).add(node)
        return out

    def model_nodes(self) -> ModelNodes:
        """`nodes_by_model`, kept until a node's model changes."""
        if self._model_nodes is None:
            self._model_nodes = ModelNodes(self.nodes_by_model())
        return self._model_nodes

    def restart_usage(self) -> None:
        """Forget every charge (under a new tree); the caller charges every pod again."""
        self.usage = Usage(self.tree)

    # -- capacity --------------------------------------------------------------------------
    def set_node(
        self, name: str, allocatable: Amounts | None, labels: Mapping[str, str] | None = None
    ) -> bool:
        """Record a node's allocatable (None: gone); True when its GPU model changed (the
        pods on it must be charged again)."""
        old = self._allocatable.pop(name, None)
        if old is not None:
            add_into(self._total, old, -1)
        before = self._model.pop(name, "")
        model = model_of_product((labels or {}).get(GPU_PRODUCT_LABEL, ""))
        if allocatable is not None:
            if model:
                self._model[name] = model
            counted = allocatable_amounts(allocatable)
            self._allocatable[name] = counted | model_amounts(counted, model)
            add_into(self._total, self._allocatable[name])
        if model != before:
            self._model_nodes = None
        return model != before

    def set_shared(self, name: str, node: NodeState | None) -> None:
        """Count the shared GPUs of `name` (its placement view; None: gone) as one GPU each,
        in place of what its allocatable says of them. Call after `set_node`."""
        old = self._shared.pop(name, None)
        if old is not None:
            add_into(self._total, old, -1)
        fix = {} if node is None else shared_gpu_fix(node)
        if fix:
            self._shared[name] = fix | model_amounts(fix, self._model.get(name, ""))
            add_into(self._total, self._shared[name])

    def capacity(self) -> dict[str, int]:
        """What gputopo can schedule, per managed resource."""
        foreign = self._foreign.used(ROOT)
        return {r: max(self._total.get(r, 0) - foreign.get(r, 0), 0) for r in self.tree.managed}


def _store(into: dict[Any, Obj], key: Any, etype: str, obj: Obj) -> None:
    if etype == "DELETED":
        into.pop(key, None)
    else:
        into[key] = obj
