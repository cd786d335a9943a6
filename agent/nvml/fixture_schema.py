"""Typed reading of fixture documents: every failure names the file, the key path and the reason.

`fixture.py` drives it section by section; this module only knows how to read one value, one NUMA
node, one GPU or one MIG device, and raises `FixtureError("<file>: <path>: <reason>")`.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from agent.docread import DocReader
from agent.errors import FixtureError
from agent.model import (
    FABRIC_SUCCESS,
    ZERO_CLUSTER_UUID,
    FabricState,
    Gpu,
    GpuFabric,
    GpuUuid,
    MigDevice,
    MigMode,
    MigUuid,
    NumaNode,
    parse_cpulist,
)
from agent.nvml.mig_profiles import MEMORY_SLICES, MigProfile, profile_by_name, profiles_for
from agent.nvml.nvml_fabric import status_words
from agent.nvml.sysfs import hugepage_kb
from agent.plural import counted

_BUS_RE = re.compile(r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_CC_RE = re.compile(r"\d+\.\d+")
_UINT32_MAX = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Ctx(DocReader):
    """Reads one fixture file; failures raise `FixtureError`."""

    error: ClassVar[type[Exception]] = FixtureError


def read_numa(ctx: Ctx, raw: Any, path: str, count: int) -> NumaNode:
    doc = ctx.mapping(raw, path, ("id", "cpus"), ("memoryMiB", "hugepages", "distances"))
    node_id = ctx.as_int(doc["id"], f"{path}.id", minimum=0)
    try:
        cpus = parse_cpulist(ctx.as_str(doc["cpus"], f"{path}.cpus", hint=' like "0-55,112-167"'))
    except ValueError as exc:
        ctx.fail(f"{path}.cpus", str(exc))
    huge_raw = ctx.any_mapping(doc.get("hugepages", {}), f"{path}.hugepages")
    hugepages: list[tuple[int, str, int]] = []
    for name, value in huge_raw.items():
        try:
            size_kb = hugepage_kb(str(name))
        except ValueError as exc:
            ctx.fail(f"{path}.hugepages.{name}", str(exc))
        hugepages.append((size_kb, str(name), ctx.as_int(value, f"{path}.hugepages.{name}", 0)))
    return NumaNode(
        id=node_id,
        cpus=cpus,
        memory_mib=ctx.as_int(doc.get("memoryMiB", 0), f"{path}.memoryMiB", minimum=0),
        hugepages=tuple((name, n) for _, name, n in sorted(hugepages)),
        distances=_read_distances(ctx, doc, path, count),
    )


def _read_distances(ctx: Ctx, doc: Mapping[str, Any], path: str, count: int) -> tuple[int, ...]:
    if "distances" not in doc:
        return ()  # filled in with Linux's defaults (10 local, 20 remote) once positions are known
    raw = ctx.as_list(doc["distances"], f"{path}.distances")
    if len(raw) != count:
        ctx.fail(
            f"{path}.distances",
            f"has {counted(len(raw), 'entry', 'entries')} for {counted(count, 'NUMA node')}",
        )
    return tuple(ctx.as_int(d, f"{path}.distances[{i}]", minimum=1) for i, d in enumerate(raw))


def read_gpu(ctx: Ctx, raw: Any, path: str, numa_ids: frozenset[int]) -> Gpu:
    doc = ctx.mapping(
        raw,
        path,
        ("index", "uuid", "name", "memoryMiB", "pciBusId", "numaNode", "computeCapability"),
        ("minor", "migMode", "migDevices", "memoryAffinity", "fabric", "memoryReservedMiB"),
    )
    index = ctx.as_int(doc["index"], f"{path}.index", minimum=0)
    numa = ctx.as_int(doc["numaNode"], f"{path}.numaNode", minimum=-1)
    if numa >= 0 and numa not in numa_ids:
        known = ", ".join(map(str, sorted(numa_ids)))
        ctx.fail(
            f"{path}.numaNode", f"NUMA node {numa} is not in numa (known: {known}; -1 = unknown)"
        )
    mode_text = ctx.as_str(doc.get("migMode", "disabled"), f"{path}.migMode")
    if mode_text not in MigMode.__members__.values():
        ctx.fail(f"{path}.migMode", f"{mode_text!r} is not one of disabled, enabled, unsupported")
    gpu = Gpu(
        index=index,
        uuid=GpuUuid(
            ctx.as_str(doc["uuid"], f"{path}.uuid", re.compile(r"GPU-[0-9a-fA-F-]+"), " GPU UUID")
        ),
        product=ctx.as_str(doc["name"], f"{path}.name"),
        memory_mib=ctx.as_int(doc["memoryMiB"], f"{path}.memoryMiB", minimum=1),
        memory_reserved_mib=ctx.as_int(
            doc.get("memoryReservedMiB", 0), f"{path}.memoryReservedMiB", minimum=0
        ),
        pci_bus_id=ctx.as_str(
            doc["pciBusId"], f"{path}.pciBusId", _BUS_RE, ' PCI bus id like "00000000:18:00.0"'
        ),
        minor=ctx.as_int(doc.get("minor", index), f"{path}.minor", minimum=0),
        numa_node=None if numa < 0 else numa,
        compute_capability=ctx.as_str(
            doc["computeCapability"],
            f"{path}.computeCapability",
            _CC_RE,
            ' compute capability like "8.0"',
        ),
        mig_mode=MigMode(mode_text),
        memory_affinity=_read_affinity(ctx, doc.get("memoryAffinity"), path, numa_ids),
        fabric=_read_fabric(ctx, doc.get("fabric"), f"{path}.fabric"),
    )
    migs = _read_mig_devices(ctx, gpu, doc.get("migDevices", []), path)
    return dataclasses.replace(gpu, mig_devices=migs)


def _read_affinity(ctx: Ctx, raw: Any, gpu_path: str, numa_ids: frozenset[int]) -> tuple[int, ...]:
    """`memoryAffinity`: the NUMA nodes NVML names for the GPU's memory (absent: NVML is silent)."""
    if raw is None:
        return ()
    path = f"{gpu_path}.memoryAffinity"
    items = ctx.as_list(raw, path)
    if not items:
        ctx.fail(path, "empty list (leave memoryAffinity out when NVML does not answer)")
    nodes = [ctx.as_int(item, f"{path}[{i}]", minimum=0) for i, item in enumerate(items)]
    for i, node in enumerate(nodes):
        if node not in numa_ids:
            known = ", ".join(map(str, sorted(numa_ids)))
            ctx.fail(f"{path}[{i}]", f"NUMA node {node} is not in numa (known: {known})")
        if node in nodes[:i]:
            ctx.fail(f"{path}[{i}]", f"NUMA node {node} is listed twice")
    return tuple(sorted(nodes))


def _read_fabric(ctx: Ctx, raw: Any, path: str) -> GpuFabric | None:
    """`fabric` (DESIGN §13): absent where NVML answers NotSupported for the GPU's fabric info."""
    if raw is None:
        return None
    doc = ctx.mapping(raw, path, ("state",), ("clusterUuid", "cliqueId", "status"))
    state = ctx.as_str(doc["state"], f"{path}.state")
    if state not in FabricState.__members__.values():
        ctx.fail(f"{path}.state", f"{state!r} is not one of {', '.join(FabricState)}")
    text = ctx.as_str(doc.get("clusterUuid", ZERO_CLUSTER_UUID), f"{path}.clusterUuid")
    try:
        cluster = str(uuid.UUID(text))
    except ValueError:
        ctx.fail(f"{path}.clusterUuid", f"{text!r} is not a UUID")
    if cluster != text:
        ctx.fail(f"{path}.clusterUuid", f"{text!r} is not in canonical form ({cluster})")
    status = ctx.as_str(doc.get("status", FABRIC_SUCCESS), f"{path}.status")
    if status not in status_words():
        ctx.fail(f"{path}.status", f"{status!r} is not {FABRIC_SUCCESS} or an NVML error word")
    clique = ctx.as_int(doc.get("cliqueId", 0), f"{path}.cliqueId", minimum=0)
    if clique > _UINT32_MAX:
        ctx.fail(f"{path}.cliqueId", f"{clique} does not fit NVML's 32-bit clique ID")
    return GpuFabric(
        cluster_uuid=cluster, clique_id=clique, state=FabricState(state), status=status
    )


def _read_mig_devices(ctx: Ctx, gpu: Gpu, raw: Any, gpu_path: str) -> tuple[MigDevice, ...]:
    path = f"{gpu_path}.migDevices"
    items = ctx.as_list(raw, path)
    if items and gpu.mig_mode is not MigMode.ENABLED:
        ctx.fail(path, f"{len(items)} MIG devices listed while migMode is {gpu.mig_mode}")
    profiles = profiles_for(gpu.product, gpu.memory_mib)
    if gpu.mig_mode is MigMode.ENABLED and not profiles:
        ctx.fail(f"{gpu_path}.migMode", f"MIG is not modelled for {gpu.product!r}")
    placed: list[tuple[MigDevice, str]] = []
    for i, item in enumerate(items):
        mig = _read_mig(ctx, item, f"{path}[{i}]", profiles)
        _check_placement(ctx, mig, f"{path}[{i}]", placed, profiles)
        placed.append((mig, f"{path}[{i}]"))
    return tuple(sorted((m for m, _ in placed), key=lambda m: m.start))


def _read_mig(ctx: Ctx, raw: Any, path: str, profiles: tuple[MigProfile, ...]) -> MigDevice:
    doc = ctx.mapping(raw, path, ("profile", "uuid", "giId", "ciId", "memoryMiB", "start", "size"))
    name = ctx.as_str(doc["profile"], f"{path}.profile")
    profile = profile_by_name(profiles, name)
    if profile is None:
        known = ", ".join(p.name for p in profiles)
        ctx.fail(f"{path}.profile", f"{name!r} is not a MIG profile of this GPU (known: {known})")
    return MigDevice(
        uuid=MigUuid(
            ctx.as_str(doc["uuid"], f"{path}.uuid", re.compile(r"MIG-[0-9a-zA-Z/-]+"), " MIG UUID")
        ),
        profile=name,
        gi_id=ctx.as_int(doc["giId"], f"{path}.giId", minimum=0),
        ci_id=ctx.as_int(doc["ciId"], f"{path}.ciId", minimum=0),
        memory_mib=ctx.as_int(doc["memoryMiB"], f"{path}.memoryMiB", minimum=1),
        start=ctx.as_int(doc["start"], f"{path}.start", minimum=0),
        size=ctx.as_int(doc["size"], f"{path}.size", minimum=1),
        multiprocessors=profile.sms,
    )


def _check_placement(
    ctx: Ctx,
    mig: MigDevice,
    path: str,
    placed: list[tuple[MigDevice, str]],
    profiles: tuple[MigProfile, ...],
) -> None:
    """§5.5: allowed start and size per profile, no overlap, per-profile caps, unique GI ids."""
    prof = next(p for p in profiles if p.name == mig.profile)
    if mig.start not in prof.starts:
        allowed = ", ".join(map(str, prof.starts))
        ctx.fail(
            f"{path}.start", f"{mig.profile} cannot start at slice {mig.start} (allowed: {allowed})"
        )
    if mig.size != prof.size:
        ctx.fail(f"{path}.size", f"{mig.profile} takes {prof.size} memory slices, not {mig.size}")
    if mig.start + mig.size > MEMORY_SLICES:
        ctx.fail(
            f"{path}.start", f"placement {mig.start}:{mig.size} runs past slice {MEMORY_SLICES - 1}"
        )
    for other, other_path in placed:
        if mig.start < other.start + other.size and other.start < mig.start + mig.size:
            ctx.fail(
                path,
                f"placement {mig.profile}@{mig.start}:{mig.size} overlaps "
                f"{other.profile}@{other.start}:{other.size} ({other_path})",
            )
        if other.gi_id == mig.gi_id:
            ctx.fail(f"{path}.giId", f"GPU instance id {mig.gi_id} is already used by {other_path}")
    same = sum(1 for other, _ in placed if other.profile == mig.profile) + 1
    if same > prof.max_instances:
        ctx.fail(path, f"more than {prof.max_instances} {mig.profile} instance(s) on one GPU")
    if sum(o.compute_slices for o, _ in placed) + mig.compute_slices > 7:
        ctx.fail(path, "the layout needs more than 7 compute slices")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedLoad:
    """What a GPU uses from `after_s` seconds after the fake NVML is created (issue 47); a
    value left None keeps the GPU's previous reading."""

    after_s: float
    gpu: int  # GPU index
    memory_used_mib: int | None = None
    sm_percent: int | None = None
    power_w: float | None = None


_LOAD_VALUES = ("memoryUsedMiB", "smPercent", "powerW")


def scripted(
    ctx: Ctx,
    raw: Any,
    key: str,
    gpus: Sequence[Gpu],
    optional: tuple[str, ...],
    required: tuple[str, ...] = (),
) -> Iterator[tuple[str, dict[str, Any], float, int]]:
    """(path, entry, afterSeconds, GPU index) of a scripted list (`events`, `load`)."""
    for i, item in enumerate(ctx.as_list(raw, key) if raw is not None else ()):
        path = f"{key}[{i}]"
        doc = ctx.mapping(item, path, ("afterSeconds", "gpu", *required), optional)
        after = ctx.as_number(doc["afterSeconds"], f"{path}.afterSeconds")
        yield path, doc, after, read_gpu_index(ctx, doc["gpu"], f"{path}.gpu", len(gpus))


def read_gpu_index(ctx: Ctx, raw: Any, path: str, count: int) -> int:
    """A GPU index of a fixture with `count` GPUs."""
    gpu = ctx.as_int(raw, path, minimum=0)
    if gpu >= count:
        ctx.fail(path, f"no GPU with index {gpu} ({counted(count, 'GPU')})")
    return gpu


def read_load_script(ctx: Ctx, raw: Any, gpus: Sequence[Gpu]) -> tuple[ScriptedLoad, ...]:
    """The fixture's `load` list: `{afterSeconds, gpu, memoryUsedMiB?, smPercent?, powerW?}`."""
    out = []
    for path, doc, after, gpu in scripted(ctx, raw, "load", gpus, _LOAD_VALUES):
        values = {
            key: None if doc.get(key) is None else read(doc[key], f"{path}.{key}")
            for key, read in (
                ("memoryUsedMiB", lambda v, p: ctx.as_int(v, p, 0)),
                ("smPercent", lambda v, p: ctx.as_int(v, p, 0)),
                ("powerW", ctx.as_number),
            )
        }
        memory = values["memoryUsedMiB"]
        if memory is not None and memory > gpus[gpu].memory_mib:
            ctx.fail(f"{path}.memoryUsedMiB", f"above the GPU's {gpus[gpu].memory_mib} MiB")
        out.append(
            ScriptedLoad(
                after_s=after,
                gpu=gpu,
                memory_used_mib=None if memory is None else int(memory),
                sm_percent=None if values["smPercent"] is None else int(values["smPercent"]),
                power_w=values["powerW"],
            )
        )
    return tuple(sorted(out, key=lambda e: e.after_s))
