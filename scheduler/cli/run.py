"""`gputopo-scheduler run`: the secondary scheduler against a cluster, until SIGTERM/SIGINT.

Settings: `scheduler.cli.settings` (bad input exits 2 with one line naming the problem). The start
is ordered for the first bind: read and check the flags and GPUTOPO_<FLAG> variables
(`read_flags`; a bad one exits before anything connects), connect with the kubeconfig they name
(else kubectl's order; `scheduler.kubeapi.connection`, without the `kubernetes` client) and send
the lists of the two big collections, nodes and pods (`KubeClient.prefetch`), with the reads the
runtime makes before its informers start (its Lease, discovery: `first_reads`); only then read the
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
from typing import TYPE_CHECKING

from agent import logsetup
from agent.errors import ConfigError
from agent.stopsignals import StopSignals
from scheduler.kubeapi import resourceclaims, workloads
from scheduler.kubeapi.client import NODES, PODS, KubeClient, Read, lease_read

if TYPE_CHECKING:
    from scheduler.cli.settings import RunSettings

__all__ = ["first_reads", "identity", "main", "run"]

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
        from scheduler.cli.settings import DEFAULT_NAME, DEFAULT_NAMESPACE, read_flags

        flags = read_flags(argv, environ)
        early = _send_first_requests(
            flags.given_value("kubeconfig"),
            first_reads(
                flags.given_value("leader-elect-namespace") or DEFAULT_NAMESPACE,
                flags.given_value("scheduler-name") or DEFAULT_NAME,
            ),
        )
        settings = flags.settings()
        logsetup.configure(settings.log_format)
        kube = _client(early, settings)
        from scheduler.cli.runtime import Runtime, unreachable

        why = unreachable(kube, settings)
        runtime = Runtime(settings, kube, pause_gc=True) if why is None else None
        kube.forget_prefetched_reads()
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


def first_reads(namespace: str, scheduler_name: str) -> list[Read]:
    """The reads a `Runtime` makes before its informers start, sent with the first lists:
    `unreachable`'s Lease, and the discovery of upstream PodGroups and of DRA. Those the
    settings turn out not to make (another name) are dropped unread."""
    return [
        lease_read(namespace, scheduler_name),
        *workloads.discovery(),
        resourceclaims.discovery(),
    ]


@dataclass(frozen=True, slots=True)
class FirstLists:
    """The lists and reads sent before the settings were read, on the connection of
    `kubeconfig`."""

    kubeconfig: str | None
    kube: KubeClient


def _send_first_requests(kubeconfig: str | None, reads: Sequence[Read]) -> FirstLists | None:
    """Connect with `kubeconfig` (None: kubectl's order) and send the nodes and pods lists and
    `reads`; None where the credentials cannot be read (the settings and the connection say why
    later)."""
    try:
        kube = KubeClient.from_kubeconfig(kubeconfig, STARTING, identity())
    except Exception:  # noqa: BLE001 (an early start only: the real one reports it)
        return None
    kube.prefetch((NODES, PODS))
    kube.prefetch_reads(reads)
    return FirstLists(kubeconfig, kube)


def _client(early: FirstLists | None, settings: RunSettings) -> KubeClient:
    """The scheduler's client: the early one where the settings name its kubeconfig (its
    requests already sent), else a new one that sends them now."""
    if early is not None and early.kubeconfig == settings.kubeconfig:
        return early.kube.renamed(settings.scheduler_name)
    _drop(early)
    kube = KubeClient.from_kubeconfig(settings.kubeconfig, settings.scheduler_name, identity())
    kube.prefetch((NODES, PODS))
    kube.prefetch_reads(first_reads(settings.leader_elect_namespace, settings.scheduler_name))
    return kube


def _drop(early: FirstLists | None) -> None:
    """Close the early connection (its answers, if any come, are not read)."""
    if early is not None:
        early.kube.close()
