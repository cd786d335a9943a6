"""The kubelet emulator itself: its stream readers when it stops right after a Register."""

from __future__ import annotations

import contextlib
import shutil
import threading

import pytest

from agent.inventory import load_inventory
from deviceplugin.allocation import Allocator
from deviceplugin.device_state import DeviceState
from deviceplugin.errors import RegistrationError
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.kubelet_registration import register
from deviceplugin.resource_plugin import ResourcePlugin
from deviceplugin.resources import build_resources
from deviceplugin.settings import PluginSettings
from deviceplugin.testing.kubelet import KubeletEmulator


@pytest.fixture
def thread_deaths(monkeypatch):
    """Exceptions that ended a thread (the emulator's stream readers) during the test."""
    deaths: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: deaths.append(args.exc_value))
    return deaths


@pytest.fixture
def kubelet_and_plugin():
    kubelet = KubeletEmulator()
    inventory = load_inventory("single-t4")
    settings = PluginSettings(device_plugin_dir=kubelet.plugin_dir)
    stop = threading.Event()
    translation = GrpcTranslation(
        "nvidia.com/gpu",
        DeviceState(build_resources(inventory, settings)),
        Allocator(settings, inventory),
        stop=stop,
    )
    plugin = ResourcePlugin(kubelet.plugin_dir, translation)
    yield kubelet, plugin
    stop.set()
    plugin.stop()
    kubelet.stop()
    shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)


def _register_at_once(kubelet: KubeletEmulator, plugin: ResourcePlugin, callers: int) -> None:
    """`callers` Registers of the same resource at the same moment; refusals are fine here."""
    go = threading.Barrier(callers)

    def call() -> None:
        go.wait()
        with contextlib.suppress(RegistrationError):
            register(kubelet.socket, endpoint=plugin.socket_name, resource_name="nvidia.com/gpu")

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def test_stream_readers_survive_registers_racing_a_restart(kubelet_and_plugin, thread_deaths):
    kubelet, plugin = kubelet_and_plugin
    rounds, stale = 100, 0
    kubelet.start()
    plugin.start()
    for _ in range(rounds):
        racer = threading.Thread(target=_register_at_once, args=(kubelet, plugin, 4))
        racer.start()
        kubelet.restart()  # closes the endpoints' channels, maybe before their readers used them
        plugin.start()  # the restart removed its socket
        racer.join(30)
        kubelet.stop()
        stale += kubelet.connected("nvidia.com/gpu")
        kubelet.start()
    deaths = [repr(e) for e in thread_deaths]
    assert (len(deaths), stale) == (0, 0), deaths[:2]  # before the fix: dozens of ValueErrors
