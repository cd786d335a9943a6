"""`RegistrationLoop`: one registered `ResourcePlugin` per advertised resource, kept so through
kubelet restarts and MIG layout changes.

A thread polls every `poll_s` (100 ms): it starts a resource plugin for each new resource in the
`DeviceState` and stops those whose resource went away, re-creates a socket the kubelet deleted, and
registers every resource again when `kubelet.sock` is re-created (a kubelet restart).

Each pending resource gets its own `Register` call in a short-lived thread, so one the kubelet
refuses or answers slowly (its dial timeout is 10 s) delays no other, and the lock is never held
across a kubelet call. A failed registration is retried after `retry_s`, doubling per failure up
to 30 s, or at once when `kubelet.sock` changes. A result that arrives after the resource's socket
or the kubelet changed is dropped; the next pass registers again. A call still running well past its
deadline (`register_timeout_s`, twice over) is given up on: its result, if it ever comes, is dropped
and the next pass makes a new one, so no resource waits on a call that never returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent import logkeys
from deviceplugin.device_state import DeviceState
from deviceplugin.errors import PluginError, RegistrationError
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.kubelet_api import KUBELET_SOCKET
from deviceplugin.kubelet_registration import SocketWatch, register
from deviceplugin.resource_plugin import ResourcePlugin

logger = logging.getLogger(__name__)

REGISTER_RESULTS = ("ok", "error")
"""The results `register_results` counts Register calls by; each served resource has both."""


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
        register_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plugin_dir = plugin_dir
        self._device_state = device_state
        self._make_translation = make_translation
        self._poll_s = poll_s
        self._retry_s = retry_s
        self._register_timeout_s = register_timeout_s
        self._clock = clock
        self._kubelet = SocketWatch(plugin_dir / KUBELET_SOCKET)
        self._plugins: dict[str, ResourcePlugin] = {}
        self._registered: set[str] = set()
        self._in_flight: dict[str, _Call] = {}  # resource -> its Register call running now
        self._calls = 0  # Register calls started, numbering each
        self._retry: dict[str, _Retry] = {}
        self._epochs: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self.registrations = 0  # successful Register calls, for tests and the benchmark
        self._results: dict[tuple[str, str], int] = {}  # (resource, ok|error) -> Register calls

    @property
    def serving(self) -> dict[str, Path]:
        """Resource name -> socket path of every running resource plugin."""
        with self._lock:
            return {name: p.socket_path for name, p in self._plugins.items() if p.running}

    @property
    def registered(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._registered)

    def waiting(self) -> dict[str, str]:
        """Why each served resource that is not registered waits: its Register call running (for
        how long), its retry (when, after how long a delay), or nothing (due on the next pass)."""
        with self._lock:
            now = self._clock()
            reasons: dict[str, str] = {}
            for name in self._plugins:
                if name in self._registered:
                    continue
                if (call := self._in_flight.get(name)) is not None:
                    reasons[name] = f"Register running for {now - call.started_at:.1f} s"
                elif (retry := self._retry.get(name)) is not None and now < retry.at:
                    reasons[name] = f"retry in {retry.at - now:.1f} s (delay {retry.delay_s:.0f} s)"
                else:
                    reasons[name] = "due on the next pass"
            return reasons

    def register_results(self) -> dict[tuple[str, str], int]:
        """Register calls made, by (resource, `ok` or `error`), from 0 for each result of each
        resource served (served once: a resource no longer advertised keeps its counts); a copy."""
        with self._lock:
            return dict(self._results)

    def start(self, stop: threading.Event) -> None:
        """Serve and register every resource now, then keep watching in a thread until `stop`.

        The directory is the kubelet's: a missing one is an error, never created here (a new
        directory would only hide a wrong path, or a host with no kubelet)."""
        if not self.plugin_dir.is_dir():
            raise PluginError(
                f"device-plugin directory {self.plugin_dir} does not exist: the kubelet creates "
                "it; set --device-plugin-dir to the kubelet's (<root-dir>/device-plugins)"
            )
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
        if self._kubelet.changed():
            logger.info("kubelet socket %s changed: registering again", self._kubelet.path)
            for name in self._plugins:
                self._unregister(name)
        self._sync_plugins()
        for name, plugin in self._plugins.items():
            if plugin.socket_lost():
                logger.info("socket %s was removed: serving it again", plugin.socket_path)
                plugin.start()
                self._unregister(name)
        self._register_pending()

    def _sync_plugins(self) -> None:
        wanted = self._device_state.view().resources
        for name in [n for n in self._plugins if n not in wanted]:
            logger.info("resource %s is no longer advertised", name, extra={logkeys.RESOURCE: name})
            self._plugins.pop(name).stop()
            self._unregister(name)
        for name in sorted(n for n in wanted if n not in self._plugins):
            plugin = ResourcePlugin(self.plugin_dir, self._make_translation(name))
            plugin.start()
            self._plugins[name] = plugin
            for result in REGISTER_RESULTS:  # from 0, so that the first of each is an increase
                self._results.setdefault((name, result), 0)

    def _register_pending(self) -> None:
        """Start a Register call for each due resource; none waits on another or holds the lock."""
        if self._kubelet.current is None:
            return
        now = self._clock()
        for name, plugin in self._plugins.items():
            call = self._in_flight.get(name)
            if call is not None and now - call.started_at > 2 * self._register_timeout_s:
                logger.warning(
                    "registering %s: the Register call has run %.0f s, past its %.0f s deadline; "
                    "giving up on it and calling again",
                    name,
                    now - call.started_at,
                    self._register_timeout_s,
                    extra={logkeys.RESOURCE: name},
                )
                self._in_flight.pop(name)
                self._unregister(name)  # its result, should it come, no longer counts
            if name in self._registered or name in self._in_flight:
                continue
            if now < self._retry.get(name, _Retry()).at:
                continue
            self._start_register(name, plugin.socket_name, now)

    def _start_register(self, name: str, endpoint: str, now: float) -> None:
        """Run one Register call in its own thread; a thread that cannot start is a failure."""
        self._calls += 1
        call = _Call(number=self._calls, started_at=now, epoch=self._epochs.get(name, 0))
        self._in_flight[name] = call
        thread = threading.Thread(
            target=self._register,
            args=(name, endpoint, call),
            name=f"register-{endpoint}",
            daemon=True,
        )
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": out of threads or memory
            self._in_flight.pop(name, None)
            retry = self._retry.get(name, _Retry()).after_failure(now, self._retry_s)
            self._retry[name] = retry
            logger.warning(
                "registering %s: no thread to call Register in (%s); retrying in %.0f s",
                name,
                exc,
                retry.delay_s,
                extra={logkeys.RESOURCE: name},
            )

    def _register(self, name: str, endpoint: str, call: _Call) -> None:
        """One Register call, outside the lock; its result counts only if nothing changed since."""
        error: Exception | None = None
        try:
            register(
                self._kubelet.path,
                endpoint=endpoint,
                resource_name=name,
                timeout_s=self._register_timeout_s,
            )
        except RegistrationError as exc:
            error = exc
        except Exception as exc:  # a bug, not the kubelet: still a failure, retried, never a hang
            logger.exception("registering %s failed unexpectedly", name)
            error = exc
        with self._lock:
            if self._in_flight.get(name) == call:
                del self._in_flight[name]  # an abandoned call's result leaves its successor alone
            result = (name, REGISTER_RESULTS[0] if error is None else REGISTER_RESULTS[1])
            self._results[result] = self._results.get(result, 0) + 1
            if name not in self._plugins or self._epochs.get(name, 0) != call.epoch:
                return  # the socket or the kubelet changed meanwhile: the next pass registers again
            if error is not None:
                retry = self._retry.get(name, _Retry()).after_failure(self._clock(), self._retry_s)
                self._retry[name] = retry
                logger.warning("%s; retrying in %.0f s", error, retry.delay_s)
                return
            self._retry.pop(name, None)
            self._registered.add(name)
            self.registrations += 1
        logger.info("registered %s", name, extra={logkeys.RESOURCE: name})

    def _unregister(self, name: str) -> None:
        """Forget `name`'s registration: a Register in flight for it no longer counts."""
        self._registered.discard(name)
        self._retry.pop(name, None)
        self._epochs[name] = self._epochs.get(name, 0) + 1

    def shutdown(self) -> None:
        """Stop every resource plugin and remove its socket."""
        with self._lock:
            self._shutdown()

    def _shutdown(self) -> None:
        for plugin in self._plugins.values():
            plugin.stop()
        for name in self._plugins:
            self._unregister(name)
        self._plugins.clear()


@dataclass(frozen=True, slots=True)
class _Call:
    """One Register call: its number (unique per loop), when it started, the epoch it counts for."""

    number: int
    started_at: float
    epoch: int


@dataclass(frozen=True, slots=True)
class _Retry:
    """When a resource whose Register failed is tried again: the delay doubles up to a cap."""

    at: float = 0.0
    delay_s: float = 0.0

    def after_failure(self, now: float, first_s: float, cap_s: float = 30.0) -> _Retry:
        delay = min(cap_s, self.delay_s * 2) if self.delay_s else first_s
        return _Retry(at=now + delay, delay_s=delay)
