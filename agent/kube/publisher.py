"""The NodeResourceTopology publisher and node labeller: the agent's only Kubernetes writes.

One object per node, named after the node, owned by the Node, written with server-side apply
(field manager `gputopo-agent`, force: gputopo is the object's only writer). The loop:

- polls the node state (inventory, health, PodResources) every `poll_s` (0.5 s) or at once after
  `poke()` (health or MIG-layout change), encodes it, and applies it only when it differs from what
  was last written: nothing is written while nothing changes;
- every `resync_s` (60 s) reads the object and the Node back and repairs any drift (a deleted or
  edited object, lost labels, a re-created Node with a new UID);
- a change of the GPUs' measured use alone (`NodeState.load`, issue 47) is written at most once
  per `load_interval_s` (30 s): until then the last object written stands, and is what a resync
  repairs with; anything else that changes (allocations, health, MIG) publishes at once and
  carries the latest measured use with it;
- writes nothing for a Node that does not exist (a mistyped `--node-name` would leave an object
  nothing owns and nothing deletes): it looks the Node up again every `node_wait_s` (5 s) and
  publishes once it appears (`publish_once` fails with `NodeNotFound` at once);
- on any API failure retries after 0.5 s, then every 1 s (`backoff_max_s`) until a write lands,
  and starts over from 0.5 s after a success. The cap is low on purpose: the retry is the probe
  that finds the API server back, so the object is current within about a second of recovery (a
  longer cap left it stale for up to the cap). A failing node costs the API server one request a
  second, and only while it has a change to write. Every attempt encodes the latest state, so the
  last state always lands. The first failure of a run is a WARNING, the later ones DEBUG (one
  line each, with the reason), the recovery INFO; so is the first write of a run and a repair
  (`published NodeResourceTopology NAME (resourceVersion N)`), routine updates DEBUG.

`KubeSink` talks to the API server; `DryRunSink` prints instead (`--dry-run`). Tests drive `step()`
with a fake clock, or `run()` with a stop Event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TextIO

import yaml

from agent.availability import (
    Availability,
    DynamicDevice,
    PodResourcesSnapshot,
    compute_availability,
)
from agent.errors import NodeNotFound, PublishError
from agent.gpu_load import LOAD_ATTRS, GpuLoad
from agent.labels import NOT_SHARED, SharingLabels, gfd_labels, label_patch
from agent.model import GpuUuid, NodeInventory
from agent.nrt import encode
from agent.numa_capacity import KubeletConfig, numa_capacity
from agent.share_usage import SharedGpu, ShareUse, with_shares

if TYPE_CHECKING:
    from agent.metrics import AgentMetrics

log = logging.getLogger(__name__)

FIELD_MANAGER = "gputopo-agent"
_COMPARED = ("topologyPolicies", "zones", "attributes")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    """What the publisher needs of its Node: the UID (ownerReference) and the labels."""

    uid: str | None
    labels: Mapping[str, str] = field(default_factory=dict)


class TopologySink(Protocol):
    def node(self, name: str) -> NodeInfo | None:
        """The Node, or None when it does not exist."""
        ...

    def get_topology(self, name: str) -> dict[str, Any] | None: ...

    def apply_topology(self, obj: Mapping[str, Any]) -> str | None:
        """Write the object; its new resourceVersion when the sink knows one."""
        ...

    def patch_labels(self, name: str, patch: Mapping[str, str | None]) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """One reading of the node: GPUs, unhealthy device IDs, and the kubelet's allocations."""

    inventory: NodeInventory
    snapshot: PodResourcesSnapshot | None  # None: no PodResources socket (allocationSource none)
    unhealthy: frozenset[str] = frozenset()
    shared: Mapping[GpuUuid, SharedGpu] = field(default_factory=dict)  # DESIGN §12
    share_use: Mapping[GpuUuid, ShareUse] = field(default_factory=dict)
    load: Mapping[int, GpuLoad] = field(default_factory=dict)  # by GPU index (issue 47)
    dynamic: tuple[DynamicDevice, ...] = ()  # the DRA driver's devices (DESIGN §14)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublisherSettings:
    node_name: str
    kubelet: KubeletConfig = field(default_factory=KubeletConfig)
    mig_strategy: str = "mixed"
    sharing: SharingLabels = NOT_SHARED  # the device plugin's sharing, as GFD labels it
    node_labels: bool = True
    publish_topology: bool = True  # False (--no-publish): labels only
    dry_run: bool = False  # the sink prints instead of writing: logs say "would"
    poll_s: float = 0.5
    resync_s: float = 60.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 1.0  # the retry finds the API server back: see the module docstring
    node_wait_s: float = 5.0  # how often a missing Node is looked up again
    load_interval_s: float = 30.0  # at most one write per interval for measured use alone


def matches(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """True when the stored object already says what `desired` says (server fields ignored)."""
    if current is None:
        return False
    if any(current.get(k) != desired.get(k) for k in _COMPARED):
        return False
    owners = (current.get("metadata") or {}).get("ownerReferences")
    return bool(owners == desired["metadata"].get("ownerReferences"))


class Publisher:
    """Keeps the node's NRT object and labels in line with `source()`; see the module docstring."""

    def __init__(
        self,
        settings: PublisherSettings,
        sink: TopologySink,
        source: Callable[[], NodeState | None],
        *,
        clock: Callable[[], float] = time.monotonic,
        stop: threading.Event | None = None,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self.settings = settings
        self._sink = sink
        self._source = source
        self._clock = clock
        self._stop = stop or threading.Event()
        self._metrics = metrics
        if metrics is not None:
            metrics.publish_passed()  # stale from here on if no pass ever succeeds
        self._wake = threading.Event()
        self._node: NodeInfo | None = None
        self._synced: NodeState | None = None
        self._availability: Availability | None = None
        self._written: dict[str, Any] | None = None
        self._next_resync = float("-inf")
        self._retry_at = float("-inf")
        self._failures = 0
        self._problem: str | None = None
        self._node_missing = False
        self._load_written_at = float("-inf")
        self._load_deferred = False  # a measured-use change waits for its interval

    @property
    def written(self) -> dict[str, Any] | None:
        """The last object that landed (None before the first write)."""
        return self._written

    @property
    def ready(self) -> bool:
        """True once the object was published (or found up to date)."""
        return self._written is not None

    @property
    def problem(self) -> str | None:
        """Why the last pass wrote nothing (an API failure, a missing Node); None once one lands."""
        return self._problem

    def poke(self) -> None:
        """Publish now instead of at the next poll (health or MIG layout changed)."""
        self._wake.set()

    @property
    def availability(self) -> Availability | None:
        """What the last encoded state said is free (the metrics read allocations from it)."""
        return self._availability

    def desired(self, state: NodeState) -> dict[str, Any]:
        """The object `state` encodes to, with the ownerReference once the Node's UID is known."""
        kubelet = self.settings.kubelet
        capacity = numa_capacity(state.inventory.numa_nodes, kubelet)
        availability = with_load(
            with_shares(
                compute_availability(
                    state.inventory, capacity, state.snapshot, state.unhealthy, state.dynamic
                ),
                state.inventory,
                state.shared,
                state.share_use,
            ),
            state.load,
        )
        self._availability = availability
        return encode(
            state.inventory,
            availability,
            node_name=self.settings.node_name,
            policy=kubelet.topology_manager_policy,
            scope=kubelet.topology_manager_scope,
            owner_uid=self._node.uid if self._node is not None else None,
        )

    def step(self) -> float:
        """One pass: read the state, write what changed; returns the seconds until the next pass."""
        now = self._clock()
        if now < self._retry_at:
            return min(self.settings.poll_s, self._retry_at - now)
        state = self._source()
        if state is None:  # allocations unreadable right now: publish nothing rather than guess
            return self.settings.poll_s
        try:
            self._sync(state, resync=now >= self._next_resync, now=now)
        except PublishError as exc:
            self._failed(exc, now)
            return min(self.settings.poll_s, self._retry_at - now)
        if self._failures:
            log.info("publishing works again after %d failed attempts", self._failures)
        self._failures, self._problem, self._node_missing = 0, None, False
        if self._metrics is not None:
            self._metrics.publish_passed()
        if now >= self._next_resync:
            self._next_resync = now + self.settings.resync_s
        return self.settings.poll_s

    def run(self) -> None:
        """Loop until the stop Event is set."""
        log.info("publishing NodeResourceTopology %s", self.settings.node_name)
        while not self._stop.is_set():
            self._wake.clear()
            delay = self.step()
            self._wake.wait(max(0.0, delay))

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def publish_once(self) -> dict[str, Any]:
        """Read the state and write it now (`--oneshot`); PublishError when that fails."""
        state = self._source()
        if state is None:
            raise PublishError(
                f"NodeResourceTopology {self.settings.node_name}: node state unreadable"
            )
        self._sync(state, resync=True, now=self._clock())
        assert self._written is not None
        return self._written

    def _sync(self, state: NodeState, *, resync: bool, now: float) -> None:
        due = self._load_deferred and now >= self._load_written_at + self.settings.load_interval_s
        if state == self._synced and not resync and not due:
            return  # the common idle case: nothing to encode or compare
        if resync or self._node is None:
            self._node = self._sink.node(self.settings.node_name)
            if self._node is None:
                raise NodeNotFound(
                    f"Node {self.settings.node_name} not found: nothing is published for it "
                    "until it exists (is --node-name right?)"
                )
        desired = self.desired(state)
        publish = self.settings.publish_topology
        deferred = self._defer_load(desired, now)
        target = self._written if deferred and self._written is not None else desired
        changed = target != self._written
        if publish and (changed or (resync and not self._stored_matches(target))):
            self._write(target, routine=changed and self._written is not None)
            self._load_written_at = now
        if self.settings.node_labels:
            self._label(state.inventory)
        self._synced = state
        if not publish:
            self._written = desired  # nothing to write: ready once the labels are in place

    def _defer_load(self, desired: dict[str, Any], now: float) -> bool:
        """True when `desired` differs from what was written only in measured use and the last
        write is younger than `load_interval_s` (structural changes publish at once; a resync
        repairs drift with what was written, so it adds no telemetry write)."""
        written = self._written
        self._load_deferred = False
        if written is None or desired == written or without_load(desired) != without_load(written):
            return False
        self._load_deferred = now < self._load_written_at + self.settings.load_interval_s
        return self._load_deferred

    def _stored_matches(self, desired: dict[str, Any]) -> bool:
        return matches(self._sink.get_topology(self.settings.node_name), desired)

    def _write(self, desired: dict[str, Any], *, routine: bool) -> None:
        """Apply `desired`; INFO unless `routine` (an update after the run's first write)."""
        start = self._clock()
        version = self._sink.apply_topology(desired)
        if self._metrics is not None:
            self._metrics.observe_publish(self._clock() - start, ok=True)
        name = self.settings.node_name
        level = logging.DEBUG if routine else logging.INFO
        if self.settings.dry_run:
            log.log(level, "would publish NodeResourceTopology %s (--dry-run)", name)
        else:
            stamp = "" if version is None else f" (resourceVersion {version})"
            log.log(level, "published NodeResourceTopology %s%s", name, stamp)
        self._written = desired

    def _label(self, inventory: NodeInventory) -> None:
        node = self._node
        if node is None:
            return
        desired = gfd_labels(inventory, self.settings.mig_strategy, self.settings.sharing)
        patch = label_patch(node.labels, desired)
        if not patch:
            return
        self._sink.patch_labels(self.settings.node_name, patch)
        merged = {k: v for k, v in {**node.labels, **patch}.items() if v is not None}
        self._node = replace(node, labels=merged)
        if self._metrics is not None:
            self._metrics.label_patches.inc()
        done = "would update labels (--dry-run)" if self.settings.dry_run else "labels updated"
        log.info("node %s %s: %s", self.settings.node_name, done, sorted(patch))

    def _failed(self, exc: PublishError, now: float) -> None:
        """Schedule the retry; WARNING for the first failure of a run and when the Node goes
        missing (or is found while the API still fails), DEBUG for the repeats."""
        missing = isinstance(exc, NodeNotFound)
        news = self._failures == 0 or missing != self._node_missing
        self._failures += 1
        self._problem, self._node_missing = str(exc), missing
        delay = min(
            self.settings.backoff_max_s, self.settings.backoff_initial_s * 2 ** (self._failures - 1)
        )
        if missing:
            delay = self.settings.node_wait_s
        self._retry_at = now + delay
        if self._metrics is not None:
            self._metrics.observe_publish(0.0, ok=False)
        log.log(
            logging.WARNING if news else logging.DEBUG,
            "publishing failed (attempt %d, retry in %.1fs): %s",
            self._failures,
            delay,
            exc,
        )


def with_load(availability: Availability, load: Mapping[int, GpuLoad]) -> Availability:
    """`availability` with each GPU's measured use (by index) beside its counts."""
    if not load:
        return availability
    gpus = tuple(replace(g, load=load.get(g.index)) for g in availability.gpus)
    return replace(availability, gpus=gpus)


def without_load(obj: Mapping[str, Any]) -> list[Any]:
    """The object's zones and attributes less the GPU zones' measured use (for comparing)."""
    zones = [
        {
            **zone,
            "attributes": [a for a in zone.get("attributes", ()) if a["name"] not in LOAD_ATTRS],
        }
        for zone in obj.get("zones", ())
    ]
    return [zones, obj.get("attributes"), obj.get("topologyPolicies")]


class DryRunSink:
    """`--dry-run`: print what would be written, as YAML documents, and write nothing."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def node(self, name: str) -> NodeInfo | None:
        return NodeInfo(uid=None)

    def get_topology(self, name: str) -> dict[str, Any] | None:
        return None

    def apply_topology(self, obj: Mapping[str, Any]) -> str | None:
        self._out.write("---\n" + yaml.safe_dump(dict(obj), sort_keys=False))
        self._out.flush()
        return None

    def patch_labels(self, name: str, patch: Mapping[str, str | None]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(patch)},
        }
        self._out.write("---\n" + yaml.safe_dump(body, sort_keys=False))
        self._out.flush()
