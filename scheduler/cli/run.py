"""`gputopo-scheduler run`: the secondary scheduler against a cluster, until SIGTERM/SIGINT.

Settings: `scheduler.cli.settings` (bad input exits 2 with one line naming the problem). The start
is ordered for the first bind: read and check the flags and GPUTOPO_<FLAG> variables
(`read_flags`; a bad one exits before anything connects), connect with the kubeconfig they name
(else kubectl's order; `scheduler.kubeapi.connection`, without the `kubernetes` client) and send
the lists of the two big collections, nodes and pods (`KubeClient.prefetch`); only then read the
config file (its module imports placement: some 0.4 s) and import the runtime
(`scheduler.cli.runtime`: informers, cache, loop, metrics), while the API server answers. The
informers take those answers as their first lists. Where the config file names another
kubeconfig, the early connection is dropped and the lists are sent again on that one.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent import logsetup
from agent.errors import ConfigError
from agent.stopsignals import StopSignals
from scheduler.kubeapi.client import NODES, PODS, KubeClient

__all__ = ["identity", "main", "run"]

PROG = "gputopo-scheduler run"
STARTING = "gputopo-scheduler"  # the early client's component, until the settings name it

log = logging.getLogger(__name__)


def identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def run(
    argv: Sequence[str], environ: Mapping[str, str], stop: threading.Event | None = None
) -> int:
    """Run until `stop` is set (default: until SIGTERM or SIGINT, from the main thread)."""
    early: FirstLists | None = None
    try:
        from scheduler.cli.settings import read_flags

        flags = read_flags(argv, environ)
        early = _send_first_lists(flags.given_value("kubeconfig"))
        settings = flags.settings()
        logsetup.configure(settings.log_format)
        kube = _client(early, settings.kubeconfig, settings.scheduler_name)
        from scheduler.cli.runtime import Runtime, unreachable

        why = unreachable(kube, settings)
        runtime = Runtime(settings, kube, pause_gc=True) if why is None else None
    except ConfigError as exc:
        _drop(early)
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    except Exception as exc:  # noqa: BLE001 (one line, never a traceback, for any start-up failure)
        _drop(early)
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


@dataclass(frozen=True, slots=True)
class FirstLists:
    """The lists sent before the settings were read, on the connection of `kubeconfig`."""

    kubeconfig: str | None
    kube: KubeClient


def _send_first_lists(kubeconfig: str | None) -> FirstLists | None:
    """Connect with `kubeconfig` (None: kubectl's order) and send the nodes and pods lists;
    None where the credentials cannot be read (the settings and the connection say why later)."""
    try:
        kube = KubeClient.from_kubeconfig(kubeconfig, STARTING, identity())
    except Exception:  # noqa: BLE001 (an early start only: the real one reports it)
        return None
    kube.prefetch((NODES, PODS))
    return FirstLists(kubeconfig, kube)


def _client(early: FirstLists | None, kubeconfig: str | None, scheduler_name: str) -> KubeClient:
    """The scheduler's client: the early one where the settings name its kubeconfig (its lists
    already sent), else a new one that sends them now."""
    if early is not None and early.kubeconfig == kubeconfig:
        return early.kube.renamed(scheduler_name)
    _drop(early)
    kube = KubeClient.from_kubeconfig(kubeconfig, scheduler_name, identity())
    kube.prefetch((NODES, PODS))
    return kube


def _drop(early: FirstLists | None) -> None:
    """Close the early connection (its answers, if any come, are not read)."""
    if early is not None:
        early.kube.close()
