"""The kubelet emulator itself: its stream readers when it stops right after a Register; and both
sides' dials, which must not inherit another channel's reconnect back-off."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time

import grpc
import pytest

from agent.inventory import load_inventory
from deviceplugin.allocation import Allocator
from deviceplugin.device_state import DeviceState
from deviceplugin.errors import RegistrationError
from deviceplugin.grpc_translation import GrpcTranslation
from deviceplugin.kubelet_registration import dial, register
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


def test_register_reaches_a_kubelet_back_up_while_another_channel_is_in_back_off(
    kubelet_and_plugin,
):
    """A concurrent call's channel to a kubelet that was down waits out its reconnect back-off;
    `register` dials afresh, so it reaches the kubelet the moment the kubelet serves again."""
    kubelet, plugin = kubelet_and_plugin
    plugin.start()
    with dial(kubelet.socket) as waiting:  # nothing serves kubelet.sock yet: its dial fails
        with pytest.raises(grpc.RpcError):
            waiting.unary_unary("/v1beta1.Registration/Register")(b"", timeout=1)
        kubelet.start()
        register(kubelet.socket, endpoint=plugin.socket_name, resource_name="nvidia.com/gpu")
    # before the fix: UNAVAILABLE at once, the shared connection still backing off (1 s, 1.6 s)
    assert kubelet.wait_for(lambda k: k.connected("nvidia.com/gpu"), 5.0)


@pytest.mark.slow
def test_the_kubelet_dials_a_plugin_afresh_not_through_an_earlier_dial_backing_off(
    kubelet_and_plugin,
):
    """A Register the kubelet is still dialling for (the plugin's socket is not there yet) leaves
    a connection in back-off; a later Register, once the plugin serves, is answered at once."""
    kubelet, plugin = kubelet_and_plugin
    kubelet.dial_timeout_s = 20.0
    kubelet.start()

    def register_early() -> None:
        with contextlib.suppress(RegistrationError):  # may time out, or lose to the later one
            register(kubelet.socket, endpoint=plugin.socket_name, resource_name="nvidia.com/gpu")

    early = threading.Thread(target=register_early)
    early.start()
    threading.Event().wait(3.3)  # the early dial has failed 3 times: next try some 0.8-3 s on
    plugin.start()
    asked = time.monotonic()
    register(kubelet.socket, endpoint=plugin.socket_name, resource_name="nvidia.com/gpu")
    answered_s = time.monotonic() - asked
    early.join(25)
    assert answered_s < 0.6  # before the fix: 0.8-3 s, the early dial's back-off
