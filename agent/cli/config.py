"""`gputopo-agent run` configuration: one frozen `AgentConfig` from flags, environment and file.

Precedence: flag > environment (`GPUTOPO_<FLAG>`, and `NODE_NAME` for the node name) > config file
> default. The config file (`--config`, YAML, `version: v1`) takes every flag under its camelCase
name (`migStrategy`, `devicePluginDir`, `noPublish`, ...) and also NVIDIA's device-plugin config
file unchanged: `flags` (`migStrategy`, `failOnInitError`, `plugin.passDeviceSpecs`,
`plugin.deviceListStrategy`, `plugin.deviceIDStrategy`; NVIDIA's other flags are accepted and
ignored), `sharing.timeSlicing` or `sharing.mps`, and `imex` (`channelIDs`, `required`).
NVIDIA's `DP_DISABLE_HEALTHCHECKS` / `DP_ENABLE_HEALTHCHECKS` are honoured. Every problem
found is reported in one `ConfigError`.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.cli import dra_config
from agent.cli.config_values import Opt, convert, split_host_port
from agent.cli.dra_config import DraSettings
from agent.dispatch import CommandParser, version_line
from agent.docread import read_yaml
from agent.errors import ConfigError
from agent.precedence import (
    Setting,
    env_var,
    first_set,
    first_value,
    from_env,
    from_flag,
    from_value,
)
from agent.share_record import DEFAULT_SHARE_RECORD
from agent.shares import DEFAULT_MPS_ROOT, DEFAULT_SCHEDULER_NAME, DEFAULT_SHARE_LOCK_NAMESPACE
from deviceplugin.nvidia_config import fold_flags, parse_imex, parse_sharing
from deviceplugin.settings import (
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    PluginSettings,
    TimeSlicing,
    XidPolicy,
)

logger = logging.getLogger(__name__)

CONFIG_VERSION = "v1"
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_SCOPES = ("container", "pod")


_OPTIONS: tuple[Opt, ...] = (
    Opt("--node-name", "this node's name (default: the host name in lower case, as the "
         "kubelet names its Node)", env_aliases=("NODE_NAME",)),
    Opt("--nvml-fixture", "fake NVML from a built-in fixture NAME or a fixture PATH; its fake "
         "GPUs reach a kubelet only with --allow-fake-gpus"),
    Opt("--allow-fake-gpus", "let --nvml-fixture's fake GPUs register with the kubelet "
         "(tests and demos; never beside a real kubelet)", "bool", False),
    Opt("--mig-strategy", "MIG strategy", "choice", "mixed", tuple(MigStrategy)),
    Opt("--device-plugin-dir", "kubelet device-plugin directory", "path",
         "/var/lib/kubelet/device-plugins"),
    Opt("--pod-resources-socket", "kubelet PodResources socket", "path",
         "/var/lib/kubelet/pod-resources/kubelet.sock"),
    Opt("--kubelet-config", "kubelet config file", "path", "/var/lib/kubelet/config.yaml"),
    Opt("--topology-manager-policy", "used when the kubelet config is unreadable", "choice",
         "none", TOPOLOGY_POLICIES),
    Opt("--topology-manager-scope", "used when the kubelet config is unreadable", "choice",
         "container", TOPOLOGY_SCOPES),
    Opt("--host-root", "where the host's /sys is mounted", "path", "/"),
    Opt(
        "--kubeconfig",
        "kubeconfig file (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)",
        "path",
    ),
    Opt("--metrics-address", "HOST:PORT of /metrics, /healthz, /readyz (port 0: ephemeral)",
         "str", ":9445"),
    Opt("--node-labels", "maintain GFD-style node labels", "choice", "on", ("on", "off")),
    Opt("--no-device-plugin", "do not serve the kubelet device-plugin API", "bool", False),
    Opt("--no-publish", "do not publish the NodeResourceTopology", "bool", False),
    Opt("--oneshot", "publish once and exit 0 (no kubelet needed)", "bool", False),
    Opt("--dry-run", "print objects instead of writing them to the API", "bool", False),
    Opt("--log-format", "log format", "choice", "text", ("text", "json")),
    Opt("--device-list-strategy", "how Allocate names devices (comma list)", "list", "envvar"),
    Opt("--device-id-strategy", "NVIDIA_VISIBLE_DEVICES lists UUIDs or indices", "choice",
         "uuid", tuple(DeviceIdStrategy)),
    Opt("--pass-device-specs", "return /dev/nvidia* device specs from Allocate", "bool", False),
    Opt("--cdi-spec-dirs", "CDI spec directories (comma list)", "list", "/etc/cdi,/var/run/cdi"),
    Opt("--fail-on-init-error", "exit when NVML or the device plugin cannot start", "bool", True),
    Opt("--health-quiet-period", "seconds without Xid before a transient fault clears",
         "float", 60.0),
    Opt("--health-recheck-interval", "seconds between probes of reset-required GPUs",
         "float", 5.0),
    Opt("--rescan-interval", "seconds between MIG layout re-scans", "float", 10.0),
    Opt("--load-window", "seconds of NVML readings (used memory, SM, power) averaged into the "
         "NRT GPU zones' measured use", "float", 60.0),
    Opt("--no-load", "do not publish the GPUs' measured use in the NRT", "bool", False),
    Opt("--load-publish-interval", "at most one NRT write per this many seconds for measured "
         "use alone (structural changes publish at once)", "float", 30.0),
    Opt("--share-lock-namespace", "namespace of the node's share lock Lease (the scheduler's)",
         "str", DEFAULT_SHARE_LOCK_NAMESPACE),
    Opt("--mps-root", "host directory of the MPS daemons' pipes (<root>/<uid>/pipe) and shm, "
         "under sharing.mps", "str", DEFAULT_MPS_ROOT),
    Opt("--share-record", "root-only file of what each share container was given (kept across "
         "node restarts)", "path", DEFAULT_SHARE_RECORD),
    Opt("--dra-gpus", "GPUs served through DRA (driver gpu.gputopo.io) instead of the device "
         "plugin: none, all, or indices/UUIDs (comma list)", "list", "none"),
    Opt("--dra-registry-dir", "the kubelet's plugin-watcher directory", "path",
         "/var/lib/kubelet/plugins_registry"),
    Opt("--dra-plugins-dir", "the kubelet's plugin directory (DRA socket and claim record)",
         "path", "/var/lib/kubelet/plugins"),
    Opt("--share-scheduler-name", "the scheduler whose share pods are served only through the "
         "share Lease", "str", DEFAULT_SCHEDULER_NAME),
)  # fmt: skip
_BY_KEY = {o.key: o for o in _OPTIONS}


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentConfig:
    node_name: str
    nvml_fixture: str | None = None
    config_file: Path | None = None
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    kubelet_config: Path = Path("/var/lib/kubelet/config.yaml")
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    host_root: Path = Path("/")
    kubeconfig: Path | None = None
    metrics_address: str = ":9445"
    node_labels: bool = True
    device_plugin: bool = True
    publish: bool = True
    oneshot: bool = False
    dry_run: bool = False
    log_format: str = "text"
    fail_on_init_error: bool = True
    allow_fake_gpus: bool = False
    share_lock_namespace: str = DEFAULT_SHARE_LOCK_NAMESPACE
    share_record: Path = Path(DEFAULT_SHARE_RECORD)
    share_scheduler_name: str = DEFAULT_SCHEDULER_NAME
    load_window_s: float = 60.0  # measured use, issue 47 (0: not published; --no-load)
    load_publish_interval_s: float = 30.0
    plugin: PluginSettings = field(default_factory=PluginSettings)
    dra: DraSettings = field(default_factory=DraSettings)

    @property
    def mig_strategy(self) -> MigStrategy:
        return self.plugin.mig_strategy

    @property
    def device_plugin_dir(self) -> Path:
        return self.plugin.device_plugin_dir

    @property
    def metrics_host_port(self) -> tuple[str, int]:
        """`(host, port)` of `metrics_address`; host "" means every interface."""
        return split_host_port(self.metrics_address)


class _Parser(CommandParser):
    def error(self, message: str) -> Any:  # argparse would print and exit 2
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gputopo-agent run",
        description="The gputopo node agent: device plugins, NodeResourceTopology publisher, GPU "
        "node labels and metrics. Precedence: flag > env > config file > default.",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"config file: ours or NVIDIA's device-plugin config (default: none; env "
        f"{env_var('--config')})",
    )
    parser.add_argument("--version", action="version", version=version_line(parser.prog))
    for opt in _OPTIONS:
        kwargs: dict[str, Any] = {"default": None, "help": _help(opt)}
        if opt.kind == "bool":
            kwargs.update(nargs="?", const="true", metavar="BOOL")
        elif opt.kind == "choice":
            kwargs.update(metavar="{" + ",".join(opt.choices) + "}")
        else:
            kwargs.update(metavar=_METAVARS.get(opt.flag) or _METAVARS[opt.kind])
        parser.add_argument(opt.flag, **kwargs)
    return parser


_METAVARS = {
    "path": "PATH",
    "float": "SECONDS",
    "list": "A,B,...",
    "str": "VALUE",
    "--node-name": "NAME",
    "--nvml-fixture": "NAME|PATH",
    "--metrics-address": "HOST:PORT",
}


def _help(opt: Opt) -> str:
    """The option's help with its default and its variables."""
    if opt.default is None:
        default = ""
    elif opt.kind == "bool":
        default = f"default: {str(opt.default).lower()}; "
    else:
        default = f"default: {opt.default}; "
    variables = ", ".join((opt.env, *opt.env_aliases))
    return f"{opt.help} ({default}env {variables})"


def load(argv: Sequence[str], environ: Mapping[str, str], path: Path | None = None) -> AgentConfig:
    """Build the configuration; raises ConfigError listing every problem."""
    args = vars(build_parser().parse_args(list(argv)))
    errors: list[str] = []
    config_path = first_value(
        from_flag("--config", args.pop("config")),
        from_env(environ, env_var("--config")),
        from_value("argument", path),
        skip_blank=True,
    )
    file_values, sharing, imex = (
        _read_file(Path(config_path), errors) if config_path else ({}, None, None)
    )
    raw: dict[str, Any] = {}
    for opt in _OPTIONS:
        raw[opt.key] = _resolve(opt, args[opt.dest], environ, file_values, errors)
    if raw["nodeName"] is None:
        raw["nodeName"] = socket.gethostname().strip().lower()
    try:
        xid_policy = XidPolicy.from_env(
            environ.get("DP_DISABLE_HEALTHCHECKS"), environ.get("DP_ENABLE_HEALTHCHECKS")
        )
    except ValueError as exc:
        errors.append(str(exc))
        xid_policy = XidPolicy()
    time_slicing = (
        parse_sharing(str(config_path), sharing, errors) if config_path else TimeSlicing()
    )
    channels = parse_imex(str(config_path), imex, errors)
    errors += _fake_gpu_problems(raw)
    dra = dra_config.dra_settings(raw, errors)
    if errors:
        raise ConfigError("invalid configuration: " + "; ".join(errors))
    config = _build(raw, Path(config_path) if config_path else None, time_slicing, xid_policy)
    config = replace(config, dra=dra)
    imex_settings = replace(channels, dev_root=config.host_root)  # where the host's /dev shows
    return replace(config, plugin=replace(config.plugin, imex=imex_settings))


def _fake_gpu_problems(raw: Mapping[str, Any]) -> list[str]:
    """A fixture's GPUs do not exist: serving them to a kubelet needs `--allow-fake-gpus`."""
    serves_kubelet = not raw["noDevicePlugin"] and not raw["oneshot"]
    if raw["nvmlFixture"] is None or not serves_kubelet or raw["allowFakeGpus"]:
        return []
    return [
        f"--nvml-fixture {raw['nvmlFixture']}: refusing to register fake GPUs with the kubelet "
        f"in {raw['devicePluginDir']}; pass --allow-fake-gpus to do that on purpose, or "
        "--oneshot or --no-device-plugin to skip the kubelet"
    ]


def _build(
    raw: Mapping[str, Any], path: Path | None, sharing: TimeSlicing, xids: XidPolicy
) -> AgentConfig:
    plugin = PluginSettings(
        device_plugin_dir=raw["devicePluginDir"],
        mig_strategy=MigStrategy(raw["migStrategy"]),
        device_list_strategies=tuple(DeviceListStrategy(s) for s in raw["deviceListStrategy"]),
        device_id_strategy=DeviceIdStrategy(raw["deviceIdStrategy"]),
        pass_device_specs=raw["passDeviceSpecs"],
        cdi_spec_dirs=tuple(Path(p) for p in raw["cdiSpecDirs"]),
        time_slicing=sharing,
        xid_policy=xids,
        health_quiet_period_s=raw["healthQuietPeriod"],
        health_recheck_interval_s=raw["healthRecheckInterval"],
        rescan_interval_s=raw["rescanInterval"],
        mps_root=raw["mpsRoot"],
    )
    return AgentConfig(
        node_name=raw["nodeName"],
        nvml_fixture=raw["nvmlFixture"],
        config_file=path,
        pod_resources_socket=raw["podResourcesSocket"],
        kubelet_config=raw["kubeletConfig"],
        topology_manager_policy=raw["topologyManagerPolicy"],
        topology_manager_scope=raw["topologyManagerScope"],
        host_root=raw["hostRoot"],
        kubeconfig=raw["kubeconfig"],
        metrics_address=raw["metricsAddress"],
        node_labels=raw["nodeLabels"] == "on",
        device_plugin=not raw["noDevicePlugin"],
        publish=not raw["noPublish"],
        oneshot=raw["oneshot"],
        dry_run=raw["dryRun"],
        log_format=raw["logFormat"],
        fail_on_init_error=raw["failOnInitError"],
        allow_fake_gpus=raw["allowFakeGpus"],
        share_lock_namespace=raw["shareLockNamespace"],
        share_record=raw["shareRecord"],
        share_scheduler_name=raw["shareSchedulerName"],
        load_window_s=0.0 if raw["noLoad"] else raw["loadWindow"],
        load_publish_interval_s=raw["loadPublishInterval"],
        plugin=plugin,
    )


def _resolve(
    opt: Opt, flag: Any, environ: Mapping[str, str], file_values: Mapping[str, Any],
    errors: list[str],
) -> Any:  # fmt: skip
    """The option's value from the first source that sets it, converted; problems go to errors."""
    in_file = opt.key in file_values
    found = first_set(
        from_flag(opt.flag, flag),
        from_env(environ, opt.env, *opt.env_aliases),
        Setting(source=file_values[opt.key][0], value=file_values[opt.key][1]) if in_file else None,
    )
    if found is not None:
        try:
            return convert(opt, found.value)
        except ValueError as exc:
            errors.append(f"{found.source}: {exc}")
    return convert(opt, opt.default) if opt.default is not None else None


def _read_file(path: Path, errors: list[str]) -> tuple[dict[str, Any], Any, Any]:
    """File values as key -> (source, raw value), and the raw `sharing` and `imex` sections."""
    try:
        doc = read_yaml(path)
    except ValueError as exc:
        errors.append(f"config file {exc}")
        return {}, None, None
    if not isinstance(doc, dict):
        errors.append(f"config file {path}: expected a mapping with `version: {CONFIG_VERSION}`")
        return {}, None, None
    if "version" not in doc:
        errors.append(f"{path}: version: missing (the file must say `version: {CONFIG_VERSION}`)")
    elif doc["version"] != CONFIG_VERSION:
        errors.append(f"{path}: version: expected {CONFIG_VERSION!r}, got {doc['version']!r}")
    values: dict[str, Any] = {}
    for key, value in doc.items():
        if key in _BY_KEY:
            values[key] = (f"{path}: {key}", value)
        elif key not in {"version", "flags", "sharing", "resources", "imex", "dra"}:
            errors.append(f"{path}: {key}: unknown key")
    if isinstance(doc.get("resources"), dict | list) and doc["resources"]:
        logger.warning("%s: resources: custom resource names are not supported; ignored", path)
    fold_flags(str(path), doc.get("flags"), values, errors)
    dra_config.file_values(path, doc.get("dra"), values, errors)
    return values, doc.get("sharing"), doc.get("imex")
