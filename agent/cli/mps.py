"""`gputopo-agent mps`: CUDA MPS for the node's shared GPUs, run by its own DaemonSet
(daemonset/optional/mps/), so an agent rollout never kills MPS clients.

It mounts each user's sized tmpfs `/dev/shm` (`agent.mps.shm`), sets the shared GPUs' compute mode
(`agent.mps.computemode`), starts one `nvidia-cuda-mps-control -f` per configured user
(`agent.mps.daemon`) and keeps them running (`agent.mps.supervisor`), writing the status file the
agent's device plugin reads to mark the MPS resource Unhealthy while a daemon is down. Metrics,
`/healthz` and `/readyz` (ready while every daemon runs) on `--metrics-address`. On SIGTERM: quit
every daemon, then restore the compute modes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from agent import logsetup
from agent.cli.nvml_source import failure_line, source_parser
from agent.dispatch import package_version
from agent.errors import AgentError
from agent.httpserver import MetricsServer
from agent.mps.computemode import ComputeModeKeeper, wanted_mode
from agent.mps.daemon import CONTROL_BINARY, ControlDaemon
from agent.mps.layout import DEFAULT_MPS_ROOT, MpsLayout, MpsUser, parse_users
from agent.mps.metrics import MpsMetrics
from agent.mps.shared_gpus import ALL, select_gpus
from agent.mps.shm import DEFAULT_SHM_SIZE, HostMounter, Mounter, mount_shms
from agent.mps.supervisor import Supervisor
from agent.nvml.backend import ComputeMode
from agent.nvml.pynvml_backend import PynvmlBackend, fake_backend
from agent.precedence import env_var, first_value, from_env
from agent.quantity import to_int
from agent.stopsignals import StopSignals

log = logging.getLogger(__name__)

PROG = "gputopo-agent mps"
MIB = 1024 * 1024
DEFAULT_METRICS_ADDRESS = ":9447"


def parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    variables = os.environ if environ is None else environ
    p = source_parser(PROG, __doc__, variables)

    def add(flag: str, default: str, text: str, **kw: object) -> None:
        value = first_value(
            from_env(variables, env_var(flag), blank_is_unset=True), default=default
        )
        p.add_argument(flag, default=value, help=f"{text} (default: {default})", **kw)  # type: ignore[arg-type]

    add("--mps-root", str(DEFAULT_MPS_ROOT), "host directory of pipe, log and shm directories")
    add("--users", "0", "Linux users to serve, UID or UID:GID, comma-separated; one daemon each")
    add("--gpus", ALL, "GPUs shared with MPS: all, or indexes/UUIDs, comma-separated")
    add(
        "--exclusive-process",
        "on",
        "hold shared GPUs in EXCLUSIVE_PROCESS (one user) or DEFAULT (several); off: leave as is",
        choices=("on", "off"),
    )
    add("--shm-size", DEFAULT_SHM_SIZE, "size of each user's /dev/shm tmpfs (a quantity)")
    add("--control", CONTROL_BINARY, "the nvidia-cuda-mps-control binary")
    add("--metrics-address", DEFAULT_METRICS_ADDRESS, "HOST:PORT for /metrics, /healthz, /readyz")
    return p


def open_backend(args: argparse.Namespace) -> PynvmlBackend:
    if args.nvml_fixture is None:
        return PynvmlBackend(host_root=args.host_root)
    return fake_backend(args.nvml_fixture)[0]


def shm_bytes(text: str) -> int:
    """`--shm-size` in bytes; ValueError names the flag."""
    try:
        size = to_int(text)
    except ValueError as exc:
        raise ValueError(f"--shm-size: {exc}") from None
    if size < MIB:
        raise ValueError(f"--shm-size: {text!r} is under 1Mi")
    return size


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    args = parser(environ).parse_args(list(argv))
    logsetup.configure(args.log_format)
    try:
        users = parse_users(args.users)
        shm_bytes(args.shm_size)
        backend = open_backend(args)
    except ValueError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    except AgentError as exc:
        sys.stderr.write(failure_line(PROG, exc))
        return 1
    try:
        return serve(args, users, backend, StopSignals().install(), threading.Event())
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 1
    finally:
        backend.close()


def serve(
    args: argparse.Namespace,
    users: Sequence[MpsUser],
    backend: PynvmlBackend,
    signals: StopSignals | None,
    stop: threading.Event,
    mounter: Mounter | None = None,
) -> int:
    """Run until `stop` is set (or a signal arrives); ValueError/OSError before anything runs.
    `mounter` mounts each user's shm (`HostMounter` by default)."""
    node_gpus = backend.gpus()
    gpus = select_gpus(node_gpus, args.gpus)
    layout = MpsLayout(Path(args.mps_root))
    mounter = mounter or HostMounter()
    mount_shms(layout, users, shm_bytes(args.shm_size), mounter)
    metrics = MpsMetrics(package_version())
    keeper = ComputeModeKeeper(
        backend, [g.uuid for g in gpus], layout.compute_mode_file, _wanted(args, users)
    )
    _report(keeper.apply(), metrics)
    visible = None if len(gpus) == len(node_gpus) else [str(g.uuid) for g in gpus]
    supervisor = Supervisor(
        _daemons(args, users, layout, mounter, visible),
        status_path=layout.status_file,
        gpus=[str(g.uuid) for g in gpus],
        metrics=metrics,
        heartbeat=lambda: metrics.observe_clients(gpus, backend.mps_clients),
    )
    try:
        ok = _serve_until_stopped(args, supervisor, metrics, signals, stop)
    finally:
        _report(keeper.restore(), metrics)
    return 0 if ok else 1


def _daemons(
    args: argparse.Namespace,
    users: Sequence[MpsUser],
    layout: MpsLayout,
    mounter: Mounter,
    visible: Sequence[str] | None,
) -> list[ControlDaemon]:
    """One control daemon per user, each with its user's shm as /dev/shm."""
    return [
        ControlDaemon(
            user=user,
            layout=layout,
            control=args.control,
            visible_gpus=visible,
            prefix=mounter.daemon_prefix(layout.shm_dir(user.uid), user),
        )
        for user in users
    ]


def _wanted(args: argparse.Namespace, users: Sequence[MpsUser]) -> ComputeMode | None:
    wanted = wanted_mode(users=len(users), exclusive_process=args.exclusive_process == "on")
    if wanted is ComputeMode.DEFAULT:
        log.warning(
            "%d users served: compute mode DEFAULT, not EXCLUSIVE_PROCESS (an EXCLUSIVE_PROCESS "
            "GPU admits one MPS server, and each user's daemon starts its own)",
            len(users),
        )
    return wanted


def _serve_until_stopped(
    args: argparse.Namespace,
    supervisor: Supervisor,
    metrics: MpsMetrics,
    signals: StopSignals | None,
    stop: threading.Event,
) -> bool:
    """Serve until stopped; False when the supervisor failed."""
    server = MetricsServer(
        args.metrics_address,
        metrics.registry,
        ready=lambda: all(s.up for s in supervisor.statuses()),
        unready_reason=lambda: _down_line(supervisor),
    ).start()
    failed: list[bool] = []
    worker = threading.Thread(
        target=_supervise, args=(supervisor, stop, failed), name="mps-supervisor"
    )
    worker.start()
    try:
        if signals is None:
            stop.wait()
        else:
            name = signals.wait(stop)
            if name is not None:
                log.info("received %s: stopping", name)
    finally:
        stop.set()
        worker.join()
        server.stop()
    return not failed


def _supervise(supervisor: Supervisor, stop: threading.Event, failed: list[bool]) -> None:
    """Run the supervisor; if it fails, stop the command (exit 1: its pod restarts) rather than
    serve a status nobody updates."""
    try:
        supervisor.run(stop)
    except Exception:
        log.exception("the MPS supervisor failed; stopping")
        failed.append(True)
        stop.set()


def _down_line(supervisor: Supervisor) -> str:
    down = [f"uid {s.uid}: {s.reason}" for s in supervisor.statuses() if not s.up]
    return "; ".join(down) or ""


def _report(problems: Sequence[str], metrics: MpsMetrics) -> None:
    for problem in problems:
        log.warning("%s", problem)
        metrics.compute_mode_errors.inc()
