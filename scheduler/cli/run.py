"""`gputopo-scheduler run`: the secondary scheduler against a cluster, until SIGTERM/SIGINT.

Settings: `scheduler.cli.settings` (bad input exits 2 with one line naming the problem). The start
is ordered for the first bind: read the settings, connect (`scheduler.kubeapi.connection`, without
the `kubernetes` client) and send the lists of the two big collections, nodes and pods
(`KubeClient.prefetch`); only then import the runtime (`scheduler.cli.runtime`: informers,
cache, loop, metrics), while the API server answers. The informers take those answers as their
first lists.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence

from agent import logsetup
from agent.errors import ConfigError
from agent.stopsignals import StopSignals
from scheduler.cli.settings import PROG, load
from scheduler.kubeapi.client import NODES, PODS, KubeClient

__all__ = ["identity", "load", "main", "run"]

log = logging.getLogger(__name__)


def identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def run(
    argv: Sequence[str], environ: Mapping[str, str], stop: threading.Event | None = None
) -> int:
    """Run until `stop` is set (default: until SIGTERM or SIGINT, from the main thread)."""
    try:
        settings = load(argv, environ)
        logsetup.configure(settings.log_format)
        kube = KubeClient.from_kubeconfig(settings.kubeconfig, settings.scheduler_name, identity())
        kube.prefetch((NODES, PODS))
        from scheduler.cli.runtime import Runtime, unreachable

        why = unreachable(kube, settings)
        runtime = Runtime(settings, kube, pause_gc=True) if why is None else None
    except ConfigError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    except Exception as exc:  # noqa: BLE001 (one line, never a traceback, for any start-up failure)
        sys.stderr.write(f"{PROG}: cannot start: {exc}\n")
        return 1
    if runtime is None:
        sys.stderr.write(f"{PROG}: {why}\n")
        kube.close()
        return 1
    signals = StopSignals().install() if stop is None else None
    stop = runtime.stop_event if stop is None else stop
    runtime.start()
    if signals is not None:
        signals.wait(stop)
    else:
        stop.wait()
    log.info("stopping")
    runtime.stop()
    kube.close()
    return 0


def main(argv: Sequence[str]) -> int:
    return run(argv, os.environ)
