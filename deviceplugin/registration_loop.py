"""`RegistrationLoop`: one registered `ResourcePlugin` per advertised resource, kept so through
kubelet restarts and MIG layout changes.

A thread polls every `poll_s` (100 ms): it starts a resource plugin for each new resource in the
`DeviceState` and stops those whose resource went away, re-creates a socket the kubelet deleted, and
registers every resource again when `kubelet.sock` is re-created (a kubelet restart). A failed
registration is retried every `retry_s`, or at once when `kubelet.sock` changes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agent import logkeys
from deviceplugin.device_state import DeviceState
from deviceplugin.errors import RegistrationError
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.kubelet_api import KUBELET_SOCKET
from deviceplugin.kubelet_registration import SocketWatch, register
from deviceplugin.resource_plugin import ResourcePlugin

logger = logging.getLogger(__name__)


class RegistrationLoop:
    """Serves and registers a resource plugin per advertised resource until `stop` is set."""

    def __init__(
        self,
        *,
        plugin_dir: Path,
        device_state: DeviceState,
        make_translation: Callable[[str], GrpcTranslation],
        poll_s: float = 0.1,
        retry_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plugin_dir = plugin_dir
        self._device_state = device_state
        self._make_translation = make_translation
        self._poll_s = poll_s
        self._retry_s = retry_s
        self._clock = clock
        self._kubelet = SocketWatch(plugin_dir / KUBELET_SOCKET)
        self._plugins: dict[str, ResourcePlugin] = {}
        self._registered: set[str] = set()
        self._next_retry = 0.0
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self.registrations = 0  # successful Register calls, for tests and the benchmark

    @property
    def serving(self) -> dict[str, Path]:
        """Resource name -> socket path of every running resource plugin."""
        with self._lock:
            return {name: p.socket_path for name, p in self._plugins.items() if p.running}

    @property
    def registered(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._registered)

    def start(self, stop: threading.Event) -> None:
        """Serve and register every resource now, then keep watching in a thread until `stop`."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.tick()
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name="deviceplugin-registration", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self._poll_s):
            try:
                self.tick()
            except Exception:
                logger.exception("device-plugin watch pass failed; retrying")
        self.shutdown()

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def tick(self) -> None:
        """One pass: sync resource plugins with the device state, repair sockets, (re-)register."""
        with self._lock:
            self._tick()

    def _tick(self) -> None:
        kubelet_restarted = self._kubelet.changed()
        if kubelet_restarted:
            logger.info("kubelet socket %s changed: registering again", self._kubelet.path)
            self._registered.clear()
        self._sync_plugins()
        for name, plugin in self._plugins.items():
            if plugin.socket_lost():
                logger.info("socket %s was removed: serving it again", plugin.socket_path)
                plugin.start()
                self._registered.discard(name)
        self._register_pending(force=kubelet_restarted)

    def _sync_plugins(self) -> None:
        wanted = self._device_state.view().resources
        for name in [n for n in self._plugins if n not in wanted]:
            logger.info("resource %s is no longer advertised", name, extra={logkeys.RESOURCE: name})
            self._plugins.pop(name).stop()
            self._registered.discard(name)
        for name in sorted(n for n in wanted if n not in self._plugins):
            plugin = ResourcePlugin(self.plugin_dir, self._make_translation(name))
            plugin.start()
            self._plugins[name] = plugin

    def _register_pending(self, *, force: bool) -> None:
        pending = [n for n in self._plugins if n not in self._registered]
        if not pending or self._kubelet.current is None:
            return
        if not force and self._clock() < self._next_retry:
            return
        for name in pending:
            plugin = self._plugins[name]
            try:
                register(self._kubelet.path, endpoint=plugin.socket_name, resource_name=name)
            except RegistrationError as exc:
                logger.warning("%s; retrying in %.0f s", exc, self._retry_s)
                self._next_retry = self._clock() + self._retry_s
                return
            self._registered.add(name)
            self.registrations += 1
            logger.info("registered %s", name, extra={logkeys.RESOURCE: name})

    def shutdown(self) -> None:
        """Stop every resource plugin and remove its socket."""
        with self._lock:
            self._shutdown()

    def _shutdown(self) -> None:
        for plugin in self._plugins.values():
            plugin.stop()
        self._plugins.clear()
        self._registered.clear()
