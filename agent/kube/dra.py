"""The DRA driver's Kubernetes I/O (DESIGN §14): claims read for the kubelet plugin, slices written.

`KubeDra` reads ResourceClaims and this node's pods (it is the kubelet plugin's `ClaimReader`) and
lists, creates, replaces and deletes this node's ResourceSlices of `gpu.gputopo.io`.
`SlicePublisher` keeps the node's pool what the inventory and health say: every `poll_s`, or at
once after `poke()`, it lists the slices (field selectors `spec.nodeName`, `spec.driver`) and
writes what `agent.dra.slices.plan_slices` asks, so slices the kubelet wiped (all of the node's at
its start, a driver's 30 s after the driver left) come back within a poll. API failures are
logged (the first as WARNING) and retried at the next poll. A field the server dropped from the
devices written (a feature gate off: `agent.dra.slices.GATED`) is logged once, as a WARNING
naming the gate and what it costs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import cached_property
from typing import Any

from kubernetes import client

from agent.dra import CLAIMS, DRIVER, GROUP, SLICES, VERSION
from agent.dra.devices import DraDevice
from agent.dra.slices import SlicePlan, plan_slices
from agent.errors import ConfigError, PublishError
from agent.kube.client import _json, _read_or_none, api_errors, list_node_pods

logger = logging.getLogger(__name__)


class KubeDra:
    """Claims, pods and slices of one node, over the real client; failures are PublishError.

    `connect` makes the API client on first use and again after it failed (no credentials yet
    is a PublishError like any other: the agent keeps serving and retries)."""

    def __init__(
        self,
        connect: client.ApiClient | Callable[[], client.ApiClient],
        node: str,
        *,
        timeout_s: float = 10.0,
    ):
        self._connect = connect if callable(connect) else lambda: connect
        self._api_client: client.ApiClient | None = None
        self.node = node
        self._timeout = timeout_s
        self.server = ""

    def _api(self) -> client.ApiClient:
        if self._api_client is None:
            try:
                self._api_client = self._connect()
            except ConfigError as exc:
                raise PublishError(f"no API server credentials: {exc}") from None
            self.server = self._api_client.configuration.host
        return self._api_client

    @property
    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self._api())

    @cached_property
    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._api())

    def read_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return _read_or_none(
            f"reading ResourceClaim {namespace}/{name}",
            lambda: self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, CLAIMS, name,
                _preload_content=False, _request_timeout=self._timeout,
            ),
            self.server,
        )  # fmt: skip

    def node_pods(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(list_node_pods(self._core, self.node, self.server, self._timeout))

    def node_uid(self) -> str | None:
        data = _read_or_none(
            f"reading Node {self.node}",
            lambda: self._core.read_node(
                self.node, _preload_content=False, _request_timeout=self._timeout
            ),
            self.server,
        )
        return None if data is None else (data.get("metadata") or {}).get("uid")

    def list_slices(self) -> list[dict[str, Any]]:
        selector = f"spec.nodeName={self.node},spec.driver={DRIVER}"
        with api_errors(f"listing ResourceSlices of {self.node}", self.server):
            response = self._custom.list_cluster_custom_object(
                GROUP, VERSION, SLICES, field_selector=selector,
                _preload_content=False, _request_timeout=self._timeout,
            )  # fmt: skip
        items: list[dict[str, Any]] = _json(response).get("items") or []
        return items

    def write(self, plan: SlicePlan) -> None:
        """Apply a plan: deletions first (they free names and devices), then the rest."""
        for name in plan.delete:
            with api_errors(f"deleting ResourceSlice {name}", self.server):
                self._custom.delete_cluster_custom_object(
                    GROUP, VERSION, SLICES, name, _request_timeout=self._timeout
                )
        for obj in plan.update:
            name = obj["metadata"]["name"]
            with api_errors(f"replacing ResourceSlice {name}", self.server):
                self._custom.replace_cluster_custom_object(
                    GROUP, VERSION, SLICES, name, obj,
                    _preload_content=False, _request_timeout=self._timeout,
                )  # fmt: skip
        for obj in plan.create:
            name = obj["metadata"]["name"]
            with api_errors(f"creating ResourceSlice {name}", self.server):
                self._custom.create_cluster_custom_object(
                    GROUP, VERSION, SLICES, obj,
                    _preload_content=False, _request_timeout=self._timeout,
                )  # fmt: skip


class SlicePublisher:
    """Keeps this node's ResourceSlices current, in its own thread (`start`/`stop`)."""

    name = "dra-slices"

    def __init__(
        self,
        sink: KubeDra,
        devices: Callable[[], Sequence[DraDevice]],
        unhealthy: Callable[[], Collection[str]],  # names of the devices to taint
        *,
        poll_s: float = 2.0,
    ) -> None:
        self._sink = sink
        self._devices = devices
        self._unhealthy = unhealthy
        self._poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._node_uid: str | None = None
        self.writes = 0
        self._noted: set[str] = set()  # what the server dropped, each logged once
        self.problem: str | None = "ResourceSlices not published yet"
        self._failing = False

    def poke(self) -> None:
        self._wake.set()

    def step(self) -> SlicePlan:
        """List, plan and write once; PublishError when a call fails."""
        if self._node_uid is None:
            self._node_uid = self._sink.node_uid()
        existing = self._sink.list_slices()
        plan = plan_slices(
            self._sink.node,
            self._devices(),
            frozenset(self._unhealthy()),
            existing,
            node_uid=self._node_uid,
        )
        for note in plan.dropped:
            if note not in self._noted:
                self._noted.add(note)
                logger.warning("%s", note)
        if not plan.empty:
            self._sink.write(plan)
            self.writes += 1
            logger.info(
                "ResourceSlices of %s: %d created, %d replaced, %d deleted",
                self._sink.node, len(plan.create), len(plan.update), len(plan.delete),
            )  # fmt: skip
        return plan

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.step()
            except PublishError as exc:
                level = logging.DEBUG if self._failing else logging.WARNING
                logger.log(level, "publishing ResourceSlices failed: %s", exc)
                self.problem, self._failing = str(exc), True
            else:
                if self._failing:
                    logger.info("publishing ResourceSlices works again")
                self.problem, self._failing = None, False
            self._wake.wait(self._poll_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)
