"""Rapid kubelet restarts: every resource's socket comes back and is registered again."""

from __future__ import annotations

import threading

import pytest

from tests.builders.kubelet import running_node

MIXED = (
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-2g.20gb",
    "nvidia.com/mig-3g.40gb",
    "nvidia.com/mig-4g.40gb",
)


def _restart_many(node, restarts: int) -> None:
    pause = threading.Event()
    for n in range(restarts):
        node.kubelet.restart()
        pause.wait(0.001 * (n % 7))  # back to back, or a few ms apart: every phase of a pass


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_socket_is_back_and_registered_after_100_rapid_kubelet_restarts():
    runs, restarts, missing_runs = 3, 100, []
    for run in range(runs):
        with running_node("dgx-a100-mig") as node:
            _restart_many(node, restarts)
            # Each resource is registered within 25 s: a Register the restarts cut off fails
            # by its 10 s deadline (one that never returns is given up on at 20 s), and is
            # made again on the next pass or after its backoff.
            registered = node.wait_registered(set(MIXED), timeout_s=25.0)
            sockets = {p.name for p in node.kubelet.plugin_dir.iterdir()}
            wanted = {path.name for path in node.plugin.registration_loop.serving.values()}
            if not registered or not wanted <= sockets or len(wanted) != len(MIXED):
                loop = node.plugin.registration_loop
                missing_runs.append(
                    (
                        run,
                        sorted(wanted - sockets),
                        sorted(set(MIXED) - set(node.kubelet.resources())),  # not registered
                        {name: node.kubelet.registering(name) for name in MIXED},  # in flight
                        sorted(loop.registered),
                        loop.register_results(),
                        loop.waiting(),
                    )
                )
    assert not missing_runs, f"{len(missing_runs)} of {runs} runs lost a socket: {missing_runs!r}"
