"""A node for integration tests: the real backend on the fake pynvml, the device plugin
serving real gRPC on unix sockets, and the kubelet emulator in a short /tmp directory."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from agent.inventory import discover
from agent.nvml.fixture import load_fixture
from agent.nvml.pynvml_backend import fake_backend
from deviceplugin.plugin import DevicePlugin
from deviceplugin.settings import PluginSettings
from deviceplugin.testing.kubelet import KubeletEmulator


class Node:
    def __init__(
        self,
        kubelet: KubeletEmulator,
        fixture: str,
        *,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], float] = time.time,
        **settings: Any,
    ) -> None:
        self.kubelet = kubelet
        quiet = replace(load_fixture(fixture), events=())
        self.backend, self.fake = fake_backend(quiet)
        self.inventory = discover(self.backend)
        self.settings = PluginSettings(device_plugin_dir=kubelet.plugin_dir, **settings)
        self.plugin = DevicePlugin(
            self.settings,
            self.backend,
            self.inventory,
            wait_timeout_s=0.05,
            clock=clock or time.monotonic,
            wall_clock=wall_clock,
        )

    def uuid(self, gpu: int) -> str:
        return self.inventory.gpus[gpu].uuid

    def wait_registered(self, names: set[str] | None = None, timeout_s: float = 5.0) -> bool:
        wanted = names or set(self.plugin.device_state.view().resources)
        # The kubelet may dial the plugin before the plugin's Register call returns: "registered"
        # means both sides agree (the kubelet streams its devices, the loop counted the call).
        kubelet_side = self.kubelet.wait_for(
            lambda k: all(k.connected(n) and k.devices(n) for n in wanted), timeout_s
        )
        return kubelet_side and eventually(
            lambda: wanted <= self.plugin.registration_loop.registered, timeout_s
        )


@contextmanager
def running_node(
    fixture: str = "dgx-a100-mig",
    *,
    refuse: Mapping[str, float] | None = None,
    **kwargs: Any,
) -> Iterator[Node]:
    """A started kubelet emulator and a started device plugin; both stopped afterwards.

    Waits until every resource is registered, unless `refuse` names resources (with the delay)
    whose `Register` the kubelet fails; the test then waits for what it expects.
    """
    kubelet = KubeletEmulator()
    for resource, after_s in (refuse or {}).items():
        kubelet.refuse(resource, after_s=after_s)
    kubelet.start()
    node = Node(kubelet, fixture, **kwargs)
    try:
        node.plugin.start()
        if not refuse:
            assert node.wait_registered(), f"not registered: {kubelet.resources()}"
        yield node
    finally:
        node.plugin.stop()
        node.backend.close()
        kubelet.stop()
        shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)


def eventually(predicate: Callable[[], bool], timeout_s: float = 2.0) -> bool:
    """Poll `predicate` (for file-system state nothing notifies about) until true or timeout."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.01)
    return True
