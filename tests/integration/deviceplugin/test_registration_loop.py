"""The registration loop against the kubelet emulator: refused and slow `Register` calls."""

from __future__ import annotations

import time

from tests.builders.kubelet import eventually, running_node

MIXED = (
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-2g.20gb",
    "nvidia.com/mig-3g.40gb",
    "nvidia.com/mig-4g.40gb",
)


def test_a_refused_resource_does_not_keep_the_others_from_registering():
    refused = MIXED[0]  # first in sort order: before the fix, nothing after it was tried
    others = MIXED[1:]
    with running_node("dgx-a100-mig", refuse={refused: 0.0}) as node:
        assert node.wait_registered(set(others), timeout_s=3.0), node.kubelet.resources()
        assert not node.kubelet.connected(refused)
        assert refused not in node.plugin.registration_loop.registered
        assert eventually(
            lambda: node.plugin.registration_loop.waiting()[refused].startswith("retry in"), 2.0
        ), node.plugin.registration_loop.waiting()
        assert set(node.plugin.registration_loop.waiting()) == {refused}
        node.kubelet.accept(refused)
        assert node.wait_registered({refused}, timeout_s=5.0)  # its own backoff: 1 s, then 2 s
        results = node.plugin.registration_loop.register_results()
    assert results[(refused, "error")] >= 1
    assert results[(refused, "ok")] == 1
    assert {results[(name, "ok")] for name in others} == {1}
    assert {results[(name, "error")] for name in others} == {0}  # from 0, never refused


def test_a_slow_refusal_neither_delays_the_others_nor_holds_the_lock():
    slow = MIXED[0]  # first in sort order: before the fix, every other waited behind it
    with running_node("dgx-a100-mig", refuse={slow: 3.0}) as node:
        started = time.monotonic()
        assert node.wait_registered(set(MIXED[1:]), timeout_s=2.5)
        assert time.monotonic() - started < 2.5
        assert not node.kubelet.connected(slow)


def test_the_loop_lock_is_free_while_a_register_call_hangs():
    slow = MIXED[-1]  # last in sort order: the others register first, then its call hangs 3 s
    with running_node("dgx-a100-mig", refuse={slow: 3.0}) as node:
        assert node.wait_registered(set(MIXED[:-1]), timeout_s=2.5)
        assert node.kubelet.wait_for(lambda k: k.registering(slow) > 0, 3.0)
        asked = time.monotonic()
        serving = node.plugin.registration_loop.serving  # takes the loop's lock
        answered_s = time.monotonic() - asked
        assert set(serving) == set(MIXED)
        assert answered_s < 1.0  # before the fix: blocked until the 3 s refusal ended
        assert not node.kubelet.connected(slow)
        waiting = node.plugin.registration_loop.waiting()
        assert set(waiting) == {slow}
        assert waiting[slow].startswith("Register running for"), waiting


def test_a_socket_deleted_while_another_register_hangs_is_served_again():
    slow = MIXED[-1]
    with running_node("dgx-a100-mig", refuse={slow: 3.0}) as node:
        loop = node.plugin.registration_loop
        assert node.wait_registered(set(MIXED[:-1]), timeout_s=2.5)
        victim = loop.serving[MIXED[1]]
        assert node.kubelet.wait_for(lambda k: k.registering(slow) > 0, 3.0)
        victim.unlink()
        assert eventually(victim.exists, timeout_s=1.5)  # repaired while the Register hangs
        assert node.wait_registered({MIXED[1]}, timeout_s=2.0)


def test_a_register_call_running_past_twice_its_deadline_is_given_up_on_and_made_again():
    slow = MIXED[-1]
    skew = [0.0]  # the loop's clock runs this far ahead of the real one
    with running_node(
        "dgx-a100-mig", refuse={slow: 3.0}, clock=lambda: time.monotonic() + skew[0]
    ) as node:
        loop = node.plugin.registration_loop
        assert node.wait_registered(set(MIXED[:-1]), timeout_s=2.5)
        assert node.kubelet.wait_for(lambda k: k.registering(slow) == 1, 3.0)
        node.kubelet.accept(slow)  # the call already running still hangs its 3 s, then fails
        skew[0] = 21.0  # past twice the 10 s deadline, as a call that never returns would be
        assert eventually(lambda: slow in loop.registered, timeout_s=2.0), loop.waiting()
        assert node.kubelet.registering(slow) == 1  # registered while the old call still hangs
        assert node.kubelet.wait_for(lambda k: k.registering(slow) == 0, 4.0)
        assert eventually(lambda: loop.register_results()[(slow, "error")] == 1, 1.0)
        assert slow in loop.registered  # the old call's late failure changed nothing
        assert loop.waiting() == {}
        assert loop.register_results()[(slow, "ok")] == 1
