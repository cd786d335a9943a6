"""What the device plugin is told to do: plain frozen values, built by `agent.cli.config`.

Pure (stdlib and the agent's pure core), so the agent's config loader, the plugin and the
tests share one definition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from agent.shares import DEFAULT_MPS_ROOT, Sharing

DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Application Xids NVIDIA's plugin ignores by default (the GPU itself is fine)."""

DEFAULT_CDI_SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))

MAX_REPLICAS = 256
"""Most time-slicing replicas per device. Each replica is one `Device` of ~66 bytes in the
resource's ListAndWatch message, which the kubelet drops whole (0 devices, nothing logged) past
gRPC's 4 MiB receive limit, i.e. past ~63,000 devices. The largest node, 16 GPUs x 7 MIG
devices = 112 units, stays under half of that at 256 replicas (28,672 devices, 1.9 MB); more
than the kubelet's 110 pods per node would ever use, even on one GPU."""

DEFAULT_DOMAIN = "nvidia.com"
"""The domain a bare `rename` tail gets (`gpu-shared` -> `nvidia.com/gpu-shared`)."""

_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUOTA_PREFIX = "requests."


def extended_resource_problem(name: str) -> str | None:
    """Why the kubelet's Register refuses `name`, or None when it accepts it.

    The kubelet's `IsExtendedResourceName`: not native (it has a `/`, and no `kubernetes.io/`),
    not starting `requests.`, and `requests.<name>` is a qualified name: a DNS subdomain of at
    most 253 characters, one `/`, then 1-63 letters, digits, `-`, `_`, `.`, alphanumeric at
    both ends.
    """
    domain, slash, tail = name.partition("/")
    if not slash:
        return "it has no domain (write example.com/<name>)"
    if "kubernetes.io/" in name:
        return "the kubernetes.io/ domain is reserved for Kubernetes' own resources"
    if name.startswith(_QUOTA_PREFIX):
        return f"names starting {_QUOTA_PREFIX!r} are reserved for quota"
    if "/" in tail:
        return "it has more than one /"
    quota_domain = _QUOTA_PREFIX + domain
    if len(quota_domain) > 253 or not _DNS_SUBDOMAIN.fullmatch(quota_domain):
        return (
            f"the domain {domain!r} is not a lowercase DNS subdomain of at most "
            f"{253 - len(_QUOTA_PREFIX)} characters"
        )
    if len(tail) > 63 or not _NAME_PART.fullmatch(tail):
        return (
            f"the part after / ({tail!r}) must be 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


class MigStrategy(StrEnum):
    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class DeviceListStrategy(StrEnum):
    ENVVAR = "envvar"
    VOLUME_MOUNTS = "volume-mounts"
    CDI_CRI = "cdi-cri"


class DeviceIdStrategy(StrEnum):
    """What NVIDIA_VISIBLE_DEVICES lists: UUIDs (default) or indices (`<gpu>` / `<gpu>:<mig>`)."""

    UUID = "uuid"
    INDEX = "index"


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedResource:
    """One `sharing.timeSlicing.resources[]` entry of NVIDIA's config file."""

    name: str  # resource to replicate, e.g. nvidia.com/gpu or nvidia.com/mig-1g.10gb
    replicas: int
    rename: str | None = None  # advertised name; a bare tail gets the `nvidia.com/` domain
    devices: int | tuple[str, ...] | None = None  # None = all; N = the first N; else indices/UUIDs

    def advertised_name(self, rename_by_default: bool) -> str:
        """The name its replicas are advertised under: `rename`, `<name>.shared` or `name`."""
        if self.rename:
            return self.rename if "/" in self.rename else f"{DEFAULT_DOMAIN}/{self.rename}"
        return f"{self.name}.shared" if rename_by_default else self.name


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeSlicing:
    """NVIDIA's `sharing.timeSlicing` or `sharing.mps` section (`sharing` says which)."""

    sharing: Sharing = Sharing.TIME_SLICING
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[SharedResource, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Imex:
    """The `imex` section of NVIDIA's config file: IMEX channels every GPU container gets.

    `channel_ids` is `()` or `(0,)` (the only values NVIDIA's plugin accepts); a channel whose
    device node is absent is skipped, unless `required`, which fails the plugin at start.
    `dev_root` is where the host's /dev is seen besides /dev itself (the agent's host root).
    """

    channel_ids: tuple[int, ...] = ()
    required: bool = False
    dev_root: Path = Path("/")


@dataclass(frozen=True, slots=True, kw_only=True)
class XidPolicy:
    """Which Xids affect health, from NVIDIA's `DP_DISABLE_HEALTHCHECKS` / `DP_ENABLE_HEALTHCHECKS`.

    An Xid is ignored when health checks are disabled (`all`/`xids`) or it is in `ignored`
    (defaults plus extras), unless it is force-enabled (`enabled`, or `enable_all`).
    """

    disabled: bool = False
    ignored: frozenset[int] = DEFAULT_IGNORED_XIDS
    enabled: frozenset[int] = frozenset()
    enable_all: bool = False

    @property
    def checks_enabled(self) -> bool:
        """False when `DP_DISABLE_HEALTHCHECKS=all` and nothing is force-enabled."""
        return self.enable_all or bool(self.enabled) or not self.disabled

    def ignores(self, xid: int) -> bool:
        if self.enable_all or xid in self.enabled:
            return False
        return self.disabled or xid in self.ignored

    @classmethod
    def from_env(cls, disable: str | None, enable: str | None) -> XidPolicy:
        """Parse the two variables; ValueError names the variable and the bad entry."""
        disabled, extra = _parse_xid_list("DP_DISABLE_HEALTHCHECKS", disable, ("all", "xids"))
        enable_all, enabled = _parse_xid_list("DP_ENABLE_HEALTHCHECKS", enable, ("all",))
        return cls(
            disabled=disabled,
            ignored=DEFAULT_IGNORED_XIDS | extra,
            enabled=enabled,
            enable_all=enable_all,
        )


def _parse_xid_list(
    variable: str, text: str | None, words: Iterable[str]
) -> tuple[bool, frozenset[int]]:
    """(a keyword like `all` was present, the Xid numbers listed)."""
    keyword, xids = False, set()
    for part in filter(None, (p.strip().lower() for p in (text or "").split(","))):
        if part in words:
            keyword = True
        elif part.isdigit():
            xids.add(int(part))
        else:
            raise ValueError(f"{variable}: {part!r} is not an Xid number or one of {sorted(words)}")
    return keyword, frozenset(xids)


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginSettings:
    """Everything the device plugin needs from the agent's configuration."""

    device_plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    mig_strategy: MigStrategy = MigStrategy.MIXED
    device_list_strategies: tuple[DeviceListStrategy, ...] = (DeviceListStrategy.ENVVAR,)
    device_id_strategy: DeviceIdStrategy = DeviceIdStrategy.UUID
    pass_device_specs: bool = False
    cdi_spec_dirs: tuple[Path, ...] = DEFAULT_CDI_SPEC_DIRS
    time_slicing: TimeSlicing = field(default_factory=TimeSlicing)
    imex: Imex = field(default_factory=Imex)
    xid_policy: XidPolicy = field(default_factory=XidPolicy)
    health_quiet_period_s: float = 60.0
    health_recheck_interval_s: float = 5.0
    rescan_interval_s: float = 10.0
    mps_root: str = DEFAULT_MPS_ROOT
    dra_gpus: frozenset[int] = frozenset()  # indices the DRA driver serves: never advertised here
