"""Simulator inputs: workloads (jobs) and clusters (node groups), from YAML/JSON or trace CSV.

Workload (`version: v1`), one entry per job; `count` repeats a job `interval` seconds apart:

```yaml
version: v1
jobs:
  - name: train          # pods are train-0, train-1, ... (train-<k>-<i> when count > 1)
    arrival: 0           # seconds from the start
    duration: 3600       # seconds; omitted = runs to the end
    replicas: 4
    minMember: 4         # > 1 makes a gang: all replicas are placed together or not at all
    count: 1
    interval: 0
    pod: {cpu: 8, memoryGiB: 64, gpus: 8, gpuModels: [NVIDIA-H100-80GB-HBM3]}
    # or gpuShare: 500 (milli of one GPU), or mig: {1g.10gb: 1}, or a share of a time-sliced
    # GPU by memory and compute (DESIGN §12): gpuMemory: 20Gi, gpuCompute: 30, or DRA claims
    # (each a ResourceClaim spec; `sim/claims.py`): claims: [{devices: {requests: [{name: g,
    #   exactly: {deviceClassName: gpu.gputopo.io, count: 2}}]}}] (a gang's: all or none)
    queue: team-a        # a leaf of `queues` (omitted: the implicit `default` queue)
    priority: 0          # inside a queue: higher first, then arrival
    topology: {required: nvidia.com/gpu.clique}  # or preferred: a gang in one domain (`domains`)
queues:                  # optional; the fields of a Queue's spec, read as a Queue is read
  - {name: org, max: {nvidia.com/gpu: 12}}
  - {name: team-a, parent: org, min: {nvidia.com/gpu: 4}, weight: 2}
```

Cluster (`version: v1`), one entry per node group (nodes `<name>-0` ... `<name>-<count-1>`):

```yaml
version: v1
nodeGroups:
  - {name: dgx, count: 4, fixture: dgx-h100, cpu: 224, memoryGiB: 2048,
     labels: {pool: train}, topology: {gputopo.io/rack: "rack-{index/2}"}}
  - {name: t4, count: 8, gpus: 2, model: T4, cpu: 104, memoryGiB: 512}
  - {name: t4-ts, count: 2, gpus: 2, model: T4, shares: 4, gpuMemoryGiB: 15}  # time-sliced
```

`fixture` is a built-in NVML fixture name or a fixture file; otherwise `gpus` and `model` (NVSwitch
links assumed). `topology` values may use `{index}` and `{index/K}` (the node's index in the group,
integer-divided by K). A trace node list (CSV) or pod list (CSV) is accepted in place of YAML.
Names without a path are built-ins from `scheduler/sim/data/`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from agent.errors import AgentError
from agent.model import MigMode
from agent.nvml.fixture import load_fixture
from scheduler.claims.model import ResourceClaim
from scheduler.placement import TopologyConstraint
from scheduler.quota import QueueSpec, QuotaTree, read_queue
from scheduler.sim.claims import claim_gpus, read_pod_claims
from scheduler.sim.domains import read_topology
from scheduler.sim.sharing import (
    GROUP_KEYS,
    POD_KEYS,
    PodUse,
    read_group_sharing,
    read_pod_share,
    read_pod_use,
)
from scheduler.sim.trace import PodClass, TraceNode, TracePod, read_node_list, read_pod_list
from scheduler.sim.yamlread import Reader, WorkloadError

__all__ = [
    "ClusterSpec",
    "Job",
    "NodeGroup",
    "PodSpec",
    "Workload",
    "WorkloadError",
    "builtin_names",
    "load_cluster",
    "load_workload",
]

GIB = 1 << 30
MIB = 1 << 20
_NONE: Mapping[str, int] = MappingProxyType({})
_NO_LABELS: Mapping[str, str] = MappingProxyType({})
_TEMPLATE = re.compile(r"\{index(?:/(\d+))?\}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSpec:
    """One replica's request: cpu in milli-cores, memory in bytes, whole GPUs or a GPU share."""

    cpu_milli: int = 1000
    memory: int = GIB
    gpus: int = 0
    gpu_milli: int = 0  # a share (< 1000) of one GPU
    gpu_memory: int | None = None  # a share of a shared GPU by memory (bytes) ...
    gpu_compute: int | None = None  # ... and compute (percent)
    mig: Mapping[str, int] = field(default_factory=lambda: _NONE)
    gpu_models: frozenset[str] = frozenset()
    claims: tuple[ResourceClaim, ...] = ()  # claim-style GPUs (`gpus` is their count)
    use: PodUse | None = None  # what it really uses (issue 47; None: what it asks)

    @property
    def gpu_milli_total(self) -> int:
        return self.gpus * 1000 + self.gpu_milli

    @property
    def pod_class(self) -> str:
        if self.claims:
            return "claims"
        if self.mig:
            return "mig"
        if self.gpu_memory is not None or self.gpu_compute is not None:
            return "share"
        return str(PodClass.of(self.gpus or (1 if self.gpu_milli else 0), self.gpu_milli or 1000))


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    name: str
    pod: PodSpec
    replicas: int = 1
    min_member: int = 1
    arrival: float = 0.0
    duration: float | None = None
    queue: str | None = None  # a leaf queue (None: `default`)
    priority: int = 0
    topology: TopologyConstraint | None = None  # its gang's domain constraint

    @property
    def is_gang(self) -> bool:
        return self.min_member > 1


@dataclass(frozen=True, slots=True)
class Workload:
    jobs: tuple[Job, ...]
    source: str = "<workload>"
    from_trace: bool = False
    queues: tuple[QueueSpec, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroup:
    name: str
    count: int = 1
    fixture: str | None = None
    gpus: int = 0
    model: str = ""
    cpu_milli: int = 96_000
    memory: int = 1024 * GIB
    max_pods: int = 110
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    topology: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    keep_name: bool = False  # a one-node group named after its node (trace node lists)
    shares: int = 0  # replicas per GPU of nvidia.com/gpu.shared (0: not shared)
    gpu_memory: int = 80 * GIB  # per GPU, for shares

    def node_name(self, index: int) -> str:
        return self.name if self.keep_name else f"{self.name}-{index}"

    def node_labels(self, index: int) -> dict[str, str]:
        out = dict(self.labels)
        for key, value in self.topology.items():
            out[key] = _TEMPLATE.sub(lambda m: str(index // int(m.group(1) or 1)), value)
        return out


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    groups: tuple[NodeGroup, ...]
    source: str = "<cluster>"

    @property
    def gpu_count(self) -> int:
        return sum(g.count * g.gpus for g in self.groups)


def builtin_names(kind: str) -> tuple[str, ...]:
    """Built-in `cluster` or `workload` names (files `data/<kind>-<name>.yaml`)."""
    folder = resources.files("scheduler.sim").joinpath("data")
    prefix = f"{kind}-"
    return tuple(
        sorted(
            p.name[len(prefix) : -5]
            for p in folder.iterdir()
            if p.name.startswith(prefix) and p.name.endswith(".yaml")
        )
    )


def _source(ref: str, kind: str) -> tuple[str, str]:
    """(text, source name) of a built-in or a file."""
    if "/" not in ref and "." not in ref:
        if ref not in builtin_names(kind):
            known = ", ".join(builtin_names(kind))
            raise WorkloadError(f"{ref}: no such built-in {kind} (built-in: {known})")
        folder = resources.files("scheduler.sim").joinpath("data")
        return folder.joinpath(f"{kind}-{ref}.yaml").read_text(encoding="utf-8"), f"{ref}.yaml"
    try:
        return Path(ref).read_text(encoding="utf-8"), ref
    except OSError as exc:
        raise WorkloadError(f"{ref}: cannot read: {exc.strerror or exc}") from None


def _document(text: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise WorkloadError(f"{source}: (document): not valid YAML/JSON: {exc}") from None
    reader = Reader(source)
    doc = reader.mapping(data, "", ("version",), ("kind", "jobs", "nodeGroups", "queues"))
    if doc["version"] != "v1":
        reader.fail("version", f"unsupported version {doc['version']!r} (expected v1)")
    return doc


def load_workload(ref: str) -> Workload:
    """A built-in workload, a YAML/JSON file, or a trace pod-list CSV."""
    if ref.endswith(".csv"):
        return trace_workload(read_pod_list(Path(ref)), ref)
    text, source = _source(ref, "workload")
    doc = _document(text, source)
    reader = Reader(source)
    queues = read_queues(reader, doc.get("queues"))
    tree = QuotaTree.build(queues)
    leaves = frozenset(name for name in tree.specs if tree.is_leaf(name))
    items = reader.as_list(doc.get("jobs"), "jobs")
    jobs: list[Job] = []
    for i, raw in enumerate(items):
        jobs.extend(_jobs(reader, raw, f"jobs[{i}]", leaves))
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[0]
        raise WorkloadError(f"{source}: jobs: duplicate job name {dup!r}")
    return Workload(tuple(sorted(jobs, key=lambda j: (j.arrival, j.name))), source, queues=queues)


_QUEUE_FIELDS = ("parent", "min", "max", "weight", "paused")


def read_queues(reader: Reader, raw: Any) -> tuple[QueueSpec, ...]:
    """The `queues:` list of a workload (absent: none); WorkloadError on the first bad entry."""
    if raw is None:
        return ()
    specs = []
    for i, item in enumerate(reader.as_list(raw, "queues")):
        path = f"queues[{i}]"
        doc = reader.mapping(item, path, ("name",), _QUEUE_FIELDS)
        name = reader.as_str(doc["name"], f"{path}.name")
        spec = read_queue(
            {"metadata": {"name": name}, "spec": {k: doc.get(k) for k in _QUEUE_FIELDS}}
        )
        if spec.problem:
            reader.fail(path, spec.problem)
        specs.append(spec)
    problems = QuotaTree.build(specs).problems
    fatal = sorted((name, p) for name, p in problems.items() if p.fatal)
    if fatal:
        name, problem = fatal[0]
        where = next((f"queues[{i}]" for i, s in enumerate(specs) if s.name == name), "queues")
        reader.fail(where, problem.message)
    return tuple(specs)


def _queue(reader: Reader, raw: Any, path: str, leaves: frozenset[str]) -> str | None:
    if raw is None:
        return None
    name = reader.as_str(raw, path)
    if name not in leaves:
        known = ", ".join(sorted(leaves))
        reader.fail(path, f"{name!r} is not a leaf queue of this workload (leaves: {known})")
    return name


def _jobs(reader: Reader, raw: Any, path: str, leaves: frozenset[str]) -> list[Job]:
    keys = ("arrival", "duration", "replicas", "minMember", "count", "interval")
    doc = reader.mapping(raw, path, ("name", "pod"), (*keys, "queue", "priority", "topology"))
    name = reader.as_str(doc["name"], f"{path}.name")
    pod = _pod(reader, doc["pod"], f"{path}.pod")
    replicas = reader.as_int(doc.get("replicas", 1), f"{path}.replicas", 1)
    min_member = reader.as_int(doc.get("minMember", 1), f"{path}.minMember", 1)
    if min_member > replicas:
        reader.fail(f"{path}.minMember", f"{min_member} is more than replicas ({replicas})")
    arrival = reader.as_float(doc.get("arrival", 0), f"{path}.arrival", 0.0)
    duration = doc.get("duration")
    if duration is not None:
        duration = reader.as_float(duration, f"{path}.duration", 0.0)
    count = reader.as_int(doc.get("count", 1), f"{path}.count", 1)
    interval = reader.as_float(doc.get("interval", 0), f"{path}.interval", 0.0)
    queue = _queue(reader, doc.get("queue"), f"{path}.queue", leaves)
    priority = reader.as_int(doc.get("priority", 0), f"{path}.priority")
    topology = read_topology(reader, doc.get("topology"), f"{path}.topology")
    return [
        Job(
            name=name if count == 1 else f"{name}-{k}",
            pod=pod,
            replicas=replicas,
            min_member=min_member,
            arrival=arrival + k * interval,
            duration=duration,
            queue=queue,
            priority=priority,
            topology=topology,
        )
        for k in range(count)
    ]


def _pod(reader: Reader, raw: Any, path: str) -> PodSpec:
    optional = ("cpu", "memoryGiB", "memoryMiB", "gpus", "gpuShare", "mig", "gpuModels", "claims")
    doc = reader.mapping(raw, path, (), (*optional, *POD_KEYS))
    gpu_memory, gpu_compute = read_pod_share(reader, doc, path)
    gpus = reader.as_int(doc.get("gpus", 0), f"{path}.gpus", 0)
    share = reader.as_int(doc.get("gpuShare", 0), f"{path}.gpuShare", 0)
    if share >= 1000:
        reader.fail(f"{path}.gpuShare", f"{share} is not a share of one GPU (1..999 milli)")
    mig = {
        reader.as_str(k, f"{path}.mig"): reader.as_int(v, f"{path}.mig.{k}", 1)
        for k, v in reader.any_mapping(doc.get("mig", {}), f"{path}.mig").items()
    }
    claims = read_pod_claims(reader, doc.get("claims", []), f"{path}.claims")
    if sum(bool(x) for x in (gpus, share, mig, gpu_memory or gpu_compute, claims)) > 1:
        reader.fail(path, "gpus, gpuShare, gpuMemory/gpuCompute, mig and claims are exclusive")
    memory = reader.as_float(doc.get("memoryGiB", 1), f"{path}.memoryGiB", 0.0) * GIB
    if "memoryMiB" in doc:
        memory = reader.as_float(doc["memoryMiB"], f"{path}.memoryMiB", 0.0) * MIB
    models = reader.as_list(doc.get("gpuModels", []), f"{path}.gpuModels")
    return PodSpec(
        cpu_milli=round(reader.as_float(doc.get("cpu", 1), f"{path}.cpu", 0.0) * 1000),
        memory=int(memory),
        gpus=gpus or claim_gpus(claims),
        gpu_milli=share,
        gpu_memory=gpu_memory,
        gpu_compute=gpu_compute,
        mig=mig,
        gpu_models=frozenset(reader.as_str(m, f"{path}.gpuModels") for m in models),
        claims=claims,
        use=read_pod_use(reader, doc, path),
    )


def trace_workload(pods: list[TracePod], source: str) -> Workload:
    """Trace pods as single-replica jobs (arrival = creation time when the file has one)."""
    jobs = []
    for pod in pods:
        whole = pod.gpu_milli >= 1000
        spec = PodSpec(
            cpu_milli=pod.cpu_milli,
            memory=pod.memory_mib * MIB,
            gpus=pod.num_gpu if whole else 0,
            gpu_milli=0 if whole else pod.gpu_milli,
            gpu_models=frozenset(pod.gpu_spec),
        )
        start = pod.creation_time
        end = pod.deletion_time
        duration = None if start is None or end is None else float(max(0, end - start))
        jobs.append(Job(name=pod.name, pod=spec, arrival=float(start or 0), duration=duration))
    return Workload(tuple(jobs), source, from_trace=True)


def load_cluster(ref: str) -> ClusterSpec:
    """A built-in cluster, a YAML/JSON file, or a trace node-list CSV."""
    if ref.endswith(".csv"):
        return trace_cluster(read_node_list(Path(ref)), ref)
    text, source = _source(ref, "cluster")
    doc = _document(text, source)
    reader = Reader(source)
    groups = [
        _group(reader, raw, f"nodeGroups[{i}]")
        for i, raw in enumerate(reader.as_list(doc.get("nodeGroups"), "nodeGroups"))
    ]
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise WorkloadError(f"{source}: nodeGroups: duplicate group name")
    return ClusterSpec(tuple(groups), source)


def _group(reader: Reader, raw: Any, path: str) -> NodeGroup:
    optional = ("count", "fixture", "gpus", "model", "cpu", "memoryGiB", "maxPods", "labels")
    doc = reader.mapping(raw, path, ("name",), (*optional, "topology", *GROUP_KEYS))
    shares, gpu_memory = read_group_sharing(reader, doc, path)
    fixture = doc.get("fixture")
    if fixture is not None and ("gpus" in doc or "model" in doc):
        reader.fail(path, "give either fixture or gpus/model, not both")
    gpus = reader.as_int(doc.get("gpus", 0), f"{path}.gpus", 0)
    model = reader.as_str(doc["model"], f"{path}.model") if "model" in doc else ""
    if gpus and not model:
        reader.fail(f"{path}.model", "required when gpus is set")
    if shares and (fixture is not None or not gpus):
        reader.fail(f"{path}.shares", "shares need gpus and model (not a fixture)")
    if fixture is not None:
        gpus, model = _fixture_gpus(reader, reader.as_str(fixture, f"{path}.fixture"), path)
    return NodeGroup(
        name=reader.as_str(doc["name"], f"{path}.name"),
        count=reader.as_int(doc.get("count", 1), f"{path}.count", 1),
        fixture=None if fixture is None else reader.as_str(fixture, f"{path}.fixture"),
        gpus=gpus,
        model=model,
        cpu_milli=round(reader.as_float(doc.get("cpu", 96), f"{path}.cpu", 0.0) * 1000),
        memory=int(reader.as_float(doc.get("memoryGiB", 1024), f"{path}.memoryGiB", 0.0) * GIB),
        max_pods=reader.as_int(doc.get("maxPods", 110), f"{path}.maxPods", 1),
        labels=reader.str_map(doc.get("labels", {}), f"{path}.labels"),
        topology=reader.str_map(doc.get("topology", {}), f"{path}.topology"),
        shares=shares,
        gpu_memory=gpu_memory,
    )


def _fixture_gpus(reader: Reader, ref: str, path: str) -> tuple[int, str]:
    """(whole GPUs, product) of an NVML fixture; MIG-enabled GPUs are not whole GPUs."""
    try:
        inventory = load_fixture(ref).inventory
    except AgentError as exc:
        reader.fail(f"{path}.fixture", str(exc))
    whole = [g for g in inventory.gpus if g.mig_mode is not MigMode.ENABLED]
    return len(whole), inventory.gpus[0].product if inventory.gpus else ""


def trace_cluster(nodes: list[TraceNode], source: str) -> ClusterSpec:
    """Trace nodes as one-node groups (names kept)."""
    groups = tuple(
        NodeGroup(
            name=n.name,
            count=1,
            gpus=n.gpus,
            model=n.model,
            cpu_milli=n.cpu_milli,
            memory=n.memory_mib * MIB,
            keep_name=True,
        )
        for n in nodes
    )
    return ClusterSpec(groups, source)
