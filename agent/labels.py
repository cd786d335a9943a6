"""Node labels in GPU Feature Discovery's style and value format (DESIGN.md §5).

`gfd_labels(inventory, strategy, sharing)` is what the node should carry; `label_patch(current,
desired)` is the smallest change (None removes a label we manage and no longer want). The
publisher applies the patch only when it is not empty; `--node-labels off` leaves all of them to
GFD.

What GFD writes and this module writes alike, so that a node selector written for GFD keeps
working on a node the agent labels:

- the GPUs: `nvidia.com/gpu.{present,product,count,memory,family,compute.major,compute.minor}`,
  `nvidia.com/mig.capable`, `nvidia.com/mig.strategy` (not under `none`), the NVLink clique;
- their sharing: `nvidia.com/gpu.replicas` (1 when not shared, 0 when every GPU is in MIG mode,
  as GFD writes for GPUs it shares nothing of), `nvidia.com/gpu.sharing-strategy`
  (`none`, `time-slicing` or `mps`), `-SHARED` after the product when replicas are advertised
  under the resource's own name, and `nvidia.com/mps.capable`;
- the driver: `nvidia.com/cuda.driver-version.{major,minor,revision,full}` and
  `nvidia.com/cuda.runtime-version.{major,minor,full}`, and GFD's deprecated spellings
  `nvidia.com/cuda.driver.{major,minor,rev}` and `nvidia.com/cuda.runtime.{major,minor}`;
- MIG devices: under `mixed`, `nvidia.com/mig-<profile>.{count,product,memory,multiprocessors,
  slices.gi,slices.ci,replicas,sharing-strategy}` for every profile on the node (the resource
  name's spelling, `+` written `.`); under `single`, the same on `nvidia.com/gpu.*`, or the
  product `<model>-MIG-INVALID` with count, replicas and memory 0 when the node's GPUs are not
  all in MIG mode with one profile.

Not written: GFD's `gpu.mode`, `gpu.machine`, `gfd.timestamp`, the MIG engine counts and the
vGPU labels (nothing the agent reads from NVML says them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.model import Gpu, MigDevice, MigMode, NodeInventory
from agent.resource_names import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_resource
from agent.shares import Sharing

PRESENT = "nvidia.com/gpu.present"
PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"
REPLICAS = "nvidia.com/gpu.replicas"
SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
MULTIPROCESSORS = "nvidia.com/gpu.multiprocessors"
SLICES_GI = "nvidia.com/gpu.slices.gi"
SLICES_CI = "nvidia.com/gpu.slices.ci"
MIG_CAPABLE = "nvidia.com/mig.capable"
MIG_STRATEGY = "nvidia.com/mig.strategy"
MPS_CAPABLE = "nvidia.com/mps.capable"
COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
FAMILY = "nvidia.com/gpu.family"
CLIQUE = "nvidia.com/gpu.clique"
"""`<clusterUuid>.<cliqueId>` of the node's multi-node NVLink domain, as GFD writes it (§13)."""

DRIVER_MAJOR = "nvidia.com/cuda.driver-version.major"
DRIVER_MINOR = "nvidia.com/cuda.driver-version.minor"
DRIVER_REVISION = "nvidia.com/cuda.driver-version.revision"
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
RUNTIME_MAJOR = "nvidia.com/cuda.runtime-version.major"
RUNTIME_MINOR = "nvidia.com/cuda.runtime-version.minor"
RUNTIME_FULL = "nvidia.com/cuda.runtime-version.full"
OLD_DRIVER_MAJOR = "nvidia.com/cuda.driver.major"
OLD_DRIVER_MINOR = "nvidia.com/cuda.driver.minor"
OLD_DRIVER_REV = "nvidia.com/cuda.driver.rev"
OLD_RUNTIME_MAJOR = "nvidia.com/cuda.runtime.major"
OLD_RUNTIME_MINOR = "nvidia.com/cuda.runtime.minor"

MANAGED = (
    PRESENT,
    PRODUCT,
    COUNT,
    MEMORY,
    REPLICAS,
    SHARING_STRATEGY,
    MULTIPROCESSORS,
    SLICES_GI,
    SLICES_CI,
    MIG_CAPABLE,
    MIG_STRATEGY,
    MPS_CAPABLE,
    COMPUTE_MAJOR,
    COMPUTE_MINOR,
    FAMILY,
    CLIQUE,
    DRIVER_MAJOR,
    DRIVER_MINOR,
    DRIVER_REVISION,
    DRIVER_FULL,
    RUNTIME_MAJOR,
    RUNTIME_MINOR,
    RUNTIME_FULL,
    OLD_DRIVER_MAJOR,
    OLD_DRIVER_MINOR,
    OLD_DRIVER_REV,
    OLD_RUNTIME_MAJOR,
    OLD_RUNTIME_MINOR,
)
"""Every fixed label this module may set (and so may remove); `managed` adds the MIG ones."""

PREFIXES = (
    "nvidia.com/gpu.",
    "nvidia.com/mig.",
    "nvidia.com/mig-",
    "nvidia.com/mps.",
    "nvidia.com/cuda.",
)
"""What every label key here starts with: the shipped admission policy lets the agent's
ServiceAccount set and remove these labels of its node, and no other
(daemonset/optional/admission/agent-own-node-policy.yaml)."""

_RESOURCE_SUFFIXES = (
    "product",
    "count",
    "memory",
    "multiprocessors",
    "slices.gi",
    "slices.ci",
    "replicas",
    "sharing-strategy",
)
_MIG_LABEL = re.compile(
    re.escape(MIG_RESOURCE_PREFIX)
    + r"[A-Za-z0-9][-A-Za-z0-9_.]*\.("
    + "|".join(re.escape(s) for s in _RESOURCE_SUFFIXES)
    + ")"
)

STRATEGIES = ("none", "single", "mixed")

_FAMILIES = {
    "3": "kepler",
    "5": "maxwell",
    "6": "pascal",
    "7.0": "volta",
    "7.2": "volta",
    "7.5": "turing",
    "8.0": "ampere",
    "8.6": "ampere",
    "8.7": "ampere",
    "8.9": "ada-lovelace",
    "9": "hopper",
    "10": "blackwell",
    "12": "blackwell",
}
_STRATEGY_VALUES = {Sharing.NONE: "none", Sharing.TIME_SLICING: "time-slicing", Sharing.MPS: "mps"}
_DROPPED = re.compile(r"[^-A-Za-z0-9_. ]")
_SLICES = re.compile(r"(?:([0-9]+)c\.)?([0-9]+)g\.")
"""A MIG profile's compute-instance and GPU-instance slices: `1c.3g.40gb` 1 and 3, `3g.40gb` 3."""
_DRIVER_VERSION = re.compile(r"([0-9]+)\.([0-9]+)(?:\.([0-9]+))?")
MAX_VALUE = 63


@dataclass(frozen=True, slots=True)
class Replication:
    """One resource of the sharing config as GFD labels it: how many replicas each device is
    advertised as, and whether they go under another name (`rename`, `renameByDefault`)."""

    replicas: int
    renamed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SharingLabels:
    """What the labels need of the device plugin's `sharing` config: its kind and its resources
    by the name they replicate (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`); a resource not
    named is not shared (1 replica)."""

    sharing: Sharing = Sharing.TIME_SLICING
    resources: Mapping[str, Replication] = field(default_factory=dict)

    def of(self, resource: str) -> Replication:
        return self.resources.get(resource, _UNSHARED)

    def strategy(self, resource: str) -> str:
        """`sharing-strategy`: the config's kind for a resource of more than one replica."""
        shared = self.of(resource).replicas > 1
        return _STRATEGY_VALUES[self.sharing] if shared else _STRATEGY_VALUES[Sharing.NONE]


_UNSHARED = Replication(1)
NOT_SHARED = SharingLabels()


def label_value(text: str) -> str:
    """A valid label value as GFD makes one: characters other than `[-A-Za-z0-9_.]` and space
    dropped, runs of spaces written `-`; at most 63 characters, alphanumeric at both ends."""
    value = "-".join(_DROPPED.sub("", text).split())[:MAX_VALUE]
    return value.strip("-_.")


def gpu_family(compute_capability: str) -> str:
    major = compute_capability.split(".", 1)[0]
    return _FAMILIES.get(compute_capability) or _FAMILIES.get(major) or "undefined"


def gfd_labels(
    inventory: NodeInventory, strategy: str = "mixed", sharing: SharingLabels = NOT_SHARED
) -> dict[str, str]:
    """The labels the node should carry; empty when it has no GPU."""
    if not inventory.gpus:
        return {}
    whole = [g for g in inventory.gpus if g.mig_mode != MigMode.ENABLED]
    first = whole[0] if whole else inventory.gpus[0]
    major, _, minor = first.compute_capability.partition(".")
    labels = {
        PRESENT: "true",
        COUNT: str(len(inventory.gpus)),
        MEMORY: str(first.memory_mib),
        MIG_CAPABLE: str(any(g.mig_mode != MigMode.UNSUPPORTED for g in inventory.gpus)).lower(),
        MPS_CAPABLE: str(sharing.sharing == Sharing.MPS and not _in_mig_mode(inventory)).lower(),
        COMPUTE_MAJOR: major,
        COMPUTE_MINOR: minor or "0",
        FAMILY: gpu_family(first.compute_capability),
        **_resource_labels(GPU_RESOURCE, [first.product], sharing if whole else None),
        **_version_labels(inventory),
    }
    if strategy != "none":
        labels[MIG_STRATEGY] = strategy
    if strategy == "single" and _in_mig_mode(inventory):
        labels.update(_single_labels(inventory, sharing))
    elif strategy == "mixed":
        labels.update(_mixed_labels(inventory, sharing))
    clique = inventory.nvlink_clique()
    if clique is not None:
        labels[CLIQUE] = clique
    return labels


def managed(key: str) -> bool:
    """Whether `key` is a label this module writes (and so may remove)."""
    return key in MANAGED or _MIG_LABEL.fullmatch(key) is not None


def label_patch(current: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str | None]:
    """The merge-patch `metadata.labels` body; empty when the node already matches."""
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    patch.update({k: None for k in current if k not in desired and managed(k)})
    return patch


def _in_mig_mode(inventory: NodeInventory) -> bool:
    return any(g.mig_mode == MigMode.ENABLED for g in inventory.gpus)


def _resource_labels(
    resource: str,
    product: Sequence[str],
    sharing: SharingLabels | None,
    count: int | None = None,
) -> dict[str, str]:
    """`<resource>.product`, `.replicas`, `.sharing-strategy` (and `.count` when given);
    `sharing` None: a resource nothing of is shared (every GPU in MIG mode), 0 replicas."""
    replication = Replication(0) if sharing is None else sharing.of(resource)
    suffix = ["SHARED"] if replication.replicas > 1 and not replication.renamed else []
    labels = {
        f"{resource}.product": label_value("-".join(label_value(p) for p in [*product, *suffix])),
        f"{resource}.replicas": str(replication.replicas),
        f"{resource}.sharing-strategy": "none" if sharing is None else sharing.strategy(resource),
    }
    if count is not None:
        labels[f"{resource}.count"] = str(count)
    return labels


def _single_labels(inventory: NodeInventory, sharing: SharingLabels) -> dict[str, str]:
    """`single`: the node's one MIG profile on `nvidia.com/gpu.*`, or the INVALID product when
    a GPU is not in MIG mode, a GPU in MIG mode has no device, or two profiles are present."""
    devices = [m for _, m in inventory.mig_devices()]
    profiles = {m.profile for m in devices}
    whole = any(g.mig_mode != MigMode.ENABLED for g in inventory.gpus)
    empty = any(g.mig_mode == MigMode.ENABLED and not g.mig_devices for g in inventory.gpus)
    if whole or empty or len(profiles) != 1:
        product = "-".join(label_value(p) for p in (inventory.gpus[0].product, "MIG", "INVALID"))
        return {PRODUCT: label_value(product), COUNT: "0", REPLICAS: "0", MEMORY: "0"}
    parent = inventory.gpus[0]
    return _mig_labels(GPU_RESOURCE, parent, devices, sharing)


def _mixed_labels(inventory: NodeInventory, sharing: SharingLabels) -> dict[str, str]:
    """`mixed`: `nvidia.com/mig-<profile>.*` for every profile on the node."""
    by_profile: dict[str, list[MigDevice]] = {}
    parents: dict[str, Gpu] = {}
    for gpu, mig in inventory.mig_devices():
        by_profile.setdefault(mig.profile, []).append(mig)
        parents.setdefault(mig.profile, gpu)
    labels: dict[str, str] = {}
    for profile, devices in sorted(by_profile.items()):
        labels.update(_mig_labels(mig_resource(profile), parents[profile], devices, sharing))
    return labels


def _mig_labels(
    resource: str, parent: Gpu, devices: Sequence[MigDevice], sharing: SharingLabels
) -> dict[str, str]:
    """One MIG resource's labels: product `<model>-MIG-<profile>`, count, replicas, sharing,
    and the first device's memory, multiprocessors (when NVML said) and slices."""
    mig = devices[0]
    labels = _resource_labels(resource, [parent.product, "MIG", mig.profile], sharing, len(devices))
    labels[f"{resource}.memory"] = str(mig.memory_mib)
    if mig.multiprocessors:
        labels[f"{resource}.multiprocessors"] = str(mig.multiprocessors)
    slices = _SLICES.match(mig.profile)
    if slices is not None:  # a name NVML gave that is not `[<c>c.]<g>g.<mem>gb`: none said
        labels[f"{resource}.slices.gi"] = slices.group(2)
        labels[f"{resource}.slices.ci"] = slices.group(1) or slices.group(2)
    return labels


def _version_labels(inventory: NodeInventory) -> dict[str, str]:
    """The driver's and CUDA's versions, in GFD's new and deprecated spellings; none of a part
    NVML did not say (a driver version not `X.Y[.Z]`, a CUDA version of 0)."""
    labels: dict[str, str] = {}
    driver = _DRIVER_VERSION.fullmatch(inventory.driver_version.strip())
    if driver is not None:
        major, minor, revision = driver.group(1), driver.group(2), driver.group(3) or ""
        labels |= {
            DRIVER_MAJOR: major,
            DRIVER_MINOR: minor,
            DRIVER_REVISION: revision,
            DRIVER_FULL: driver.group(0),
            OLD_DRIVER_MAJOR: major,
            OLD_DRIVER_MINOR: minor,
            OLD_DRIVER_REV: revision,
        }
    cuda = inventory.cuda_driver_version
    if cuda > 0:
        major, minor = str(cuda // 1000), str(cuda % 1000 // 10)
        labels |= {
            RUNTIME_MAJOR: major,
            RUNTIME_MINOR: minor,
            RUNTIME_FULL: f"{major}.{minor}",
            OLD_RUNTIME_MAJOR: major,
            OLD_RUNTIME_MINOR: minor,
        }
    return labels
