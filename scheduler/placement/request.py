"""What one pod asks for, as placement sees it (built by the scheduler runtime or the simulator).

Quantities are integers in canonical units: cpu in millicores, memory, ephemeral storage and
hugepages in bytes, extended resources in counts. Resource totals are the pod's effective request
(max of init containers, sidecars, overhead), computed by the caller as the stock scheduler does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from agent.model import MILLI_PER_GPU
from agent.resource_names import GPU_RESOURCE, mig_resource
from agent.shares import ContainerShare

__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "NODE_NAME_KEY",
    "PODS",
    "Effect",
    "HostPort",
    "InterPodPreferences",
    "InterPodRules",
    "LabelSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Operator",
    "PodRequest",
    "PodTerm",
    "PreferredNodeTerm",
    "SpreadConstraint",
    "Taint",
    "Toleration",
    "mig_resource",
]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

_EMPTY: Mapping[str, int] = MappingProxyType({})
_EMPTY_STR: Mapping[str, str] = MappingProxyType({})
_NO_LABELS: Mapping[str, Mapping[str, str]] = MappingProxyType({})


class Operator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class Effect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorRequirement:
    """One `matchExpressions` entry of a required node affinity term."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator is Operator.EXISTS:
            return value is not None
        if self.operator is Operator.DOES_NOT_EXIST:
            return value is None
        if self.operator is Operator.IN:
            return value is not None and value in self.values
        if self.operator is Operator.NOT_IN:
            return value is None or value not in self.values
        return _compare_int(value, self.values, self.operator)


def _compare_int(value: str | None, values: tuple[str, ...], op: Operator) -> bool:
    """Gt/Lt: exactly one integer value; a missing or non-integer label does not match."""
    if value is None or len(values) != 1:
        return False
    try:
        have, want = int(value), int(values[0])
    except ValueError:
        return False
    return have > want if op is Operator.GT else have < want


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSelectorTerm:
    """Requirements of a term are ANDed: `match_expressions` on the node's labels, `match_fields`
    on its name (`metadata.name`, the one field a node selector term reads); a pod's terms are
    ORed. An empty term matches nothing."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return _term_matches(self.match_expressions, self.match_fields, name, labels)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreferredNodeTerm:
    """One `preferredDuringSchedulingIgnoredDuringExecution` node affinity term: `weight`
    (1-100) for each node whose labels meet every `expressions` requirement and whose name every
    `fields` one (`metadata.name`, the one field a node selector term reads). A term of neither
    matches no node."""

    weight: int
    expressions: tuple[NodeSelectorRequirement, ...] = ()
    fields: tuple[NodeSelectorRequirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return _term_matches(self.expressions, self.fields, name, labels)


NODE_NAME_KEY = "/metadata.name"
"""A node's name among the node labels a pod's filters read, when a required node affinity
term's `matchFields` read it (no label key starts with a slash)."""


def _term_matches(
    expressions: Sequence[NodeSelectorRequirement],
    fields: Sequence[NodeSelectorRequirement],
    name: str,
    labels: Mapping[str, str],
) -> bool:
    """A node selector term: every requirement on the node's labels and name; none: no node."""
    if not expressions and not fields:
        return False
    named = {"metadata.name": name}
    return all(r.matches(labels) for r in expressions) and all(r.matches(named) for r in fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelSelector:
    """A pod label selector: every requirement holds (`matchLabels` read as `In` one value). No
    requirement selects every pod; a term or constraint without a selector (None) selects none."""

    requirements: tuple[NodeSelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodTerm:
    """One required inter-pod (anti-)affinity term: the pods `selector` picks in `namespaces`
    (None: every namespace) and in the namespaces whose labels `namespace_selector` matches
    (None: none), in the domain of the node label `topology_key`."""

    selector: LabelSelector | None
    namespaces: frozenset[str] | None
    topology_key: str
    namespace_selector: LabelSelector | None = None

    def selects(
        self, pod: PodRequest, namespace_labels: Mapping[str, Mapping[str, str]] = _NO_LABELS
    ) -> bool:
        """Whether the term picks `pod`; `namespace_labels`: each namespace's labels (what
        `namespace_selector` reads)."""
        return (
            self.selector is not None
            and self.in_namespaces(pod, namespace_labels)
            and self.selector.matches(pod.labels)
        )

    def in_namespaces(
        self, pod: PodRequest, namespace_labels: Mapping[str, Mapping[str, str]] = _NO_LABELS
    ) -> bool:
        """Whether `pod`'s namespace is one the term reads."""
        if self.namespaces is None or pod.namespace in self.namespaces:
            return True
        chosen = self.namespace_selector
        return chosen is not None and chosen.matches(namespace_labels.get(pod.namespace, {}))


@dataclass(frozen=True, slots=True, kw_only=True)
class SpreadConstraint:
    """One `DoNotSchedule` topology spread constraint. Pods of the pod's own namespace that
    `selector` picks are counted per value of `topology_key` on the nodes that count
    (`honor_affinity`: only those the pod's node selector and affinity accept; `honor_taints`:
    only those whose taints it tolerates); fewer such values than `min_domains` reads the
    smallest count as 0."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class InterPodRules:
    """What a pod requires of the pods around it: required affinity and anti-affinity terms and
    `DoNotSchedule` topology spread constraints (preferences are not rules)."""

    affinity: tuple[PodTerm, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class HostPort:
    """A port a pod's container (or sidecar) takes on its node's network: `ip` "" is every
    address (an unset `hostIP`, `0.0.0.0` or `::`)."""

    port: int
    protocol: str = "TCP"
    ip: str = ""

    def overlaps(self, other: HostPort) -> bool:
        """Whether two pods asking these could not both run on one node (kube-scheduler's
        `NodePorts`: the same port and protocol, on the same address or on every one)."""
        return (
            self.port == other.port
            and self.protocol == other.protocol
            and (not self.ip or not other.ip or self.ip == other.ip)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class InterPodPreferences:
    """What a pod prefers of the pods around it: preferred affinity and anti-affinity terms,
    each with its weight (1-100), and `ScheduleAnyway` spread constraints (`interpod`'s
    `preference_bonus` weighs them)."""

    affinity: tuple[tuple[int, PodTerm], ...] = ()
    anti_affinity: tuple[tuple[int, PodTerm], ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: Effect = Effect.NO_SCHEDULE


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    """`operator` is `Equal` (default) or `Exists`; empty key with `Exists` tolerates everything."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: Effect | None = None  # None tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return bool(self.key) and self.value == taint.value


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRequest:
    """One pod's request and constraints.

    `gpus` are whole GPUs (`nvidia.com/gpu`); `gpu_milli` (1..999) is a share of one GPU, the
    simulator's model of time-slicing, and does not count against `nvidia.com/gpu`. `mig` maps a
    MIG profile (`1g.10gb`, `1g.10gb+me`) to a count of devices. `gpu_models` lists the allowed
    values of the node label `nvidia.com/gpu.product` (empty: any). `guaranteed` marks a Guaranteed
    QoS pod (its cpu and memory are NUMA-checked under `single-numa-node`). `inter_pod`: its
    required inter-pod affinity, anti-affinity and spread constraints (None: none), read against
    the other pods' `namespace` and `labels` (`interpod`); `preferences`: its preferred terms and
    `ScheduleAnyway` constraints (None: none). `host_ports`: the node ports its containers and
    sidecars take (`hostports`; like `namespace` and `labels`, not part of the pod's class: the
    nodes they refuse are applied after the filters). `preferred_affinity`: its preferred node
    affinity terms (`nodeprefs` scores them; not part of its class either).

    GPU shares (DESIGN §12): `shares` are the pod's share containers (a shared replica,
    `gpu-memory` or `gpu-compute`), placed only on shared GPUs; their replicas are in `extended`
    under their resource. `split` is how a plain `gpus` request reads on a node whose
    `nvidia.com/gpu` replicas are shared (each GPU container an equal split of its count).
    `share_reuse[i]`: the index of the share container whose replica container i runs on (i:
    its own; empty: every container its own), as the kubelet reuses an init container's devices.
    """

    key: str
    cpu_milli: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    hugepages: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # "hugepages-2Mi" -> bytes
    extended: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # other extended resources
    gpus: int = 0
    gpu_milli: int = 0
    mig: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY_STR)
    affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    gpu_models: frozenset[str] = frozenset()
    priority: int = 0
    guaranteed: bool = False
    pod_group: str | None = None
    namespace: str = field(default="", compare=False)
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY_STR, compare=False)
    inter_pod: InterPodRules | None = None
    preferences: InterPodPreferences | None = None
    host_ports: tuple[HostPort, ...] = field(default=(), compare=False)
    preferred_affinity: tuple[PreferredNodeTerm, ...] = field(default=(), compare=False)
    shares: tuple[ContainerShare, ...] = ()
    share_reuse: tuple[int, ...] = ()
    split: tuple[ContainerShare, ...] = ()
    vector: tuple[tuple[str, int], ...] = field(init=False, repr=False, compare=False)
    wants_gpu: bool = field(init=False, repr=False, compare=False)
    """True when the pod asks for any GPU: whole, share or MIG."""
    share_need: tuple[int, int, int] = field(init=False, repr=False, compare=False)
    """What one shared GPU of a node must have free at least for any of `shares` to fit there
    (replicas, memory bytes, compute percent): placement's cheap pre-check."""

    def __post_init__(self) -> None:
        problems = []
        if self.gpus < 0 or self.gpu_milli < 0 or any(v < 0 for v in self.mig.values()):
            problems.append("GPU counts must be >= 0")
        if self.gpu_milli >= MILLI_PER_GPU:
            problems.append(f"gpu_milli must be < {MILLI_PER_GPU} (use gpus for whole GPUs)")
        if self.gpus and self.gpu_milli:
            problems.append("gpus and gpu_milli are exclusive")
        if self.shares and (self.gpus or self.gpu_milli):
            problems.append("shares are exclusive with gpus and gpu_milli")
        if self.share_reuse and (
            len(self.share_reuse) != len(self.shares)
            or any(not 0 <= j <= i for i, j in enumerate(self.share_reuse))
        ):
            problems.append("share_reuse must name an earlier or the same share container")
        if problems:
            raise ValueError(f"pod {self.key}: " + "; ".join(problems))
        object.__setattr__(self, "vector", self._resource_vector())
        wants = bool(self.gpus or self.gpu_milli or self.shares or any(self.mig.values()))
        object.__setattr__(self, "wants_gpu", wants)
        need = (
            (
                min(a.replicas for a in self.shares),
                max(a.memory_bytes or 0 for a in self.shares),
                max(a.compute_percent or 0 for a in self.shares),
            )
            if self.shares
            else (0, 0, 0)
        )
        object.__setattr__(self, "share_need", need)

    def _resource_vector(self) -> tuple[tuple[str, int], ...]:
        items: dict[str, int] = {PODS: 1, CPU: self.cpu_milli, MEMORY: self.memory}
        items[EPHEMERAL_STORAGE] = self.ephemeral_storage
        items.update(self.hugepages)
        items.update(self.extended)
        if self.gpus:
            items[GPU_RESOURCE] = self.gpus
        for profile, count in self.mig.items():
            items[mig_resource(profile)] = count
        return tuple((name, qty) for name, qty in items.items() if qty > 0)

    @property
    def gpu_milli_total(self) -> int:
        """Whole GPUs and the share, in milli-GPU (MIG devices not included)."""
        return self.gpus * MILLI_PER_GPU + self.gpu_milli
