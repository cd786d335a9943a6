"""What `gputopo-agent run` is made of: a `Service` (anything with `name`, `start()` and `stop()`),
the `AgentContext` the service factories build from, and the factory type.

The context is filled in as the services are created, in order: the device plugin puts itself
there for the services after it, the topology service its publisher for the metrics service.
Each service may add a `ReadyCheck` to `ready_checks`; `/readyz` answers ready when none of them
names a problem, else 503 with the problems in the body.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agent.cli.config import AgentConfig
from agent.kube.publisher import Publisher
from agent.metrics import AgentMetrics
from agent.model import NodeInventory
from agent.nvml.backend import NvmlBackend
from agent.share_record import ShareRecord
from deviceplugin.plugin import DevicePlugin


class Service(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(slots=True)
class AgentContext:
    """What the service factories build from; filled in as services are created."""

    config: AgentConfig
    backend: NvmlBackend
    inventory: NodeInventory
    stop: threading.Event
    device_plugin: DevicePlugin | None = None
    metrics: AgentMetrics | None = None
    publisher: Publisher | None = None
    share_record: ShareRecord | None = None  # what share containers were given (DESIGN §12)
    services: list[Service] = field(default_factory=list)
    ready_checks: list[ReadyCheck] = field(default_factory=list)


ReadyCheck = Callable[[], str | None]
"""None while a service's part of readiness holds, else what is wrong (one line, for /readyz)."""

ServiceFactory = Callable[[AgentContext], Service | None]
"""Builds one service from the context, or returns None when that service is switched off."""
