"""SIGTERM ends the wait of a long-running command; the handler itself takes no lock."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from agent.stopsignals import StopSignals


@pytest.fixture
def restore_handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_signal_ends_the_wait_and_sets_stop(restore_handlers) -> None:
    signals, stop = StopSignals().install(), threading.Event()
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    assert signals.wait(stop, poll=0.05) == "SIGTERM"
    assert stop.is_set()


def test_the_handler_never_touches_the_event(restore_handlers) -> None:
    """Were the handler to set the Event, it could wait for the lock its own thread holds."""
    signals, stop = StopSignals().install(), threading.Event()
    with stop._cond:  # the main thread inside Event.wait holds exactly this lock
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs now, on this thread
    assert signals.received == [signal.SIGINT]
    assert not stop.is_set()  # set later by wait(), on the main thread, outside the handler
    assert signals.wait(stop) == "SIGINT"


def test_stop_set_elsewhere_ends_the_wait_without_a_signal(restore_handlers) -> None:
    signals, stop = StopSignals().install(), threading.Event()
    threading.Timer(0.05, stop.set).start()
    assert signals.wait(stop, poll=0.05) is None
