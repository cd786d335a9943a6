"""NVML fixtures (DESIGN.md §3): load, validate and dump.

A fixture is a node's NVML view as YAML or JSON: driver, NUMA nodes, GPUs with MIG devices, the
`nvidia-smi topo -m` GPU block, how NVLink is wired (`nvlinkFabric`), optional scripted Xid
events and optional scripted use (`load`: `{afterSeconds, gpu, memoryUsedMiB, smPercent, powerW}`,
what NVML reports from then on). A GPU's `numaNode` is what sysfs says (-1: unknown, common
in VMs); its optional `memoryAffinity` (e.g. `[0]`) lists the NUMA nodes
`nvmlDeviceGetMemoryAffinity` names, absent where NVML does not answer, so a record replays
the NRT's choice of zone (DESIGN.md §5). Its optional `fabric` (`{clusterUuid, cliqueId,
state, status}`, DESIGN.md §13) is NVML's GPU fabric
info, absent where NVML answers NotSupported.
Built-ins ship in `agent/nvml/fixtures/<name>.yaml`. Any problem raises `FixtureError` with
`"<file>: <key.path[3].x>: <reason>"`. `dump` writes the same format back (`record` uses it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from agent.docread import yaml_problem
from agent.errors import FixtureError
from agent.model import Gpu, GpuLink, LinkMatrix, NodeInventory, NumaNode, NvlinkFabric
from agent.nvml.fixture_schema import (
    Ctx,
    ScriptedLoad,
    read_gpu,
    read_load_script,
    read_numa,
    scripted,
)
from agent.plural import counted

NVLINK_MAX_LINKS = 36
"""NVML_NVLINK_MAX_LINKS: no GPU has more NVLinks than this."""

_TOP_KEYS = ("version", "driverVersion", "cudaDriverVersion", "gpus", "topology")
_TOP_OPTIONAL = ("nvlinkFabric", "numa", "events", "load")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedEvent:
    """An Xid the fake NVML reports `after_s` seconds after it is created."""

    after_s: float
    gpu: int  # GPU index
    xid: int
    gi_id: int | None = None
    ci_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fixture:
    source: str  # the file name used in messages
    inventory: NodeInventory
    events: tuple[ScriptedEvent, ...] = ()
    load: tuple[ScriptedLoad, ...] = ()  # scripted use per GPU over time (issue 47)


def builtin_names() -> tuple[str, ...]:
    """Names of the fixtures shipped in the package, sorted."""
    folder = resources.files("agent.nvml").joinpath("fixtures")
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")))


def load_fixture(ref: str | Path) -> Fixture:
    """A built-in by name (`dgx-a100`) or a YAML/JSON file by path."""
    text, source = _read_source(ref)
    if source.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FixtureError(
                f"{source}:{exc.lineno}:{exc.colno}: JSON syntax error: {exc.msg}"
            ) from None
    else:
        try:
            data = yaml.load(text, Loader=yaml.CSafeLoader)
        except yaml.YAMLError as exc:
            raise FixtureError(f"{source}{yaml_problem(exc)}") from None
    return parse_fixture(data, source)


def _read_source(ref: str | Path) -> tuple[str, str]:
    text_ref = str(ref)
    is_path = (
        isinstance(ref, Path) or "/" in text_ref or text_ref.endswith((".yaml", ".yml", ".json"))
    )
    if is_path:
        try:
            return Path(text_ref).read_text(encoding="utf-8"), text_ref
        except OSError as exc:
            raise FixtureError(f"{text_ref}: cannot read: {exc.strerror}") from None
    if text_ref not in builtin_names():
        known = ", ".join(builtin_names())
        raise FixtureError(f"{text_ref}: no such built-in fixture (built-in: {known})")
    folder = resources.files("agent.nvml").joinpath("fixtures")
    return folder.joinpath(f"{text_ref}.yaml").read_text(encoding="utf-8"), f"{text_ref}.yaml"


def parse_fixture(data: Any, source: str) -> Fixture:
    """Validate a decoded document and build the inventory it describes."""
    ctx = Ctx(source)
    if data is None:
        ctx.fail("", "empty document")
    doc = ctx.mapping(data, "", _TOP_KEYS, _TOP_OPTIONAL)
    version = ctx.as_int(doc["version"], "version")
    if version != 1:
        ctx.fail("version", f"unsupported fixture version {version} (this gputopo reads version 1)")
    fabric_text = ctx.as_str(doc.get("nvlinkFabric", "none"), "nvlinkFabric")
    if fabric_text not in NvlinkFabric.__members__.values():
        ctx.fail("nvlinkFabric", f"{fabric_text!r} is not one of nvswitch, direct, none")
    numa = _read_numa_nodes(ctx, doc.get("numa"))
    gpus = _read_gpus(ctx, doc["gpus"], frozenset(n.id for n in numa))
    links = _read_topology(ctx, doc["topology"], len(gpus), NvlinkFabric(fabric_text))
    inventory = NodeInventory(
        gpus=gpus,
        links=links,
        numa_nodes=numa,
        driver_version=ctx.as_str(doc["driverVersion"], "driverVersion"),
        cuda_driver_version=ctx.as_int(doc["cudaDriverVersion"], "cudaDriverVersion", minimum=0),
        nvlink_fabric=NvlinkFabric(fabric_text),
    )
    return Fixture(
        source=source,
        inventory=inventory,
        events=_read_events(ctx, doc.get("events"), gpus),
        load=read_load_script(ctx, doc.get("load"), gpus),
    )


def _read_numa_nodes(ctx: Ctx, raw: Any) -> tuple[NumaNode, ...]:
    if raw is None:
        return (NumaNode(id=0, distances=(10,)),)
    items = ctx.as_list(raw, "numa")
    if not items:
        ctx.fail("numa", "empty list (leave numa out for one NUMA node 0)")
    nodes = [read_numa(ctx, item, f"numa[{i}]", len(items)) for i, item in enumerate(items)]
    seen_cpus: dict[int, int] = {}
    for i, node in enumerate(nodes):
        if i and node.id <= nodes[i - 1].id:
            ctx.fail(
                f"numa[{i}].id",
                f"NUMA ids must be unique and ascending ({node.id} after {nodes[i - 1].id})",
            )
        for cpu in node.cpus:
            if cpu in seen_cpus:
                ctx.fail(f"numa[{i}].cpus", f"CPU {cpu} is also in numa[{seen_cpus[cpu]}]")
            seen_cpus[cpu] = i
        if not node.distances:
            nodes[i] = replace(
                node, distances=tuple(10 if j == i else 20 for j in range(len(nodes)))
            )
        elif node.distances[i] != 10:
            ctx.fail(
                f"numa[{i}].distances[{i}]",
                f"distance to itself must be 10, got {node.distances[i]}",
            )
    return tuple(nodes)


def _read_gpus(ctx: Ctx, raw: Any, numa_ids: frozenset[int]) -> tuple[Gpu, ...]:
    items = ctx.as_list(raw, "gpus")
    gpus = tuple(read_gpu(ctx, item, f"gpus[{i}]", numa_ids) for i, item in enumerate(items))
    seen: dict[tuple[str, str], str] = {}
    for i, gpu in enumerate(gpus):
        path = f"gpus[{i}]"
        keys = [("index", str(gpu.index)), ("uuid", gpu.uuid), ("pciBusId", gpu.pci_bus_id.lower())]
        keys += [("migDevices", m.uuid) for m in gpu.mig_devices]
        for key, value in keys:
            field = "uuid" if key == "migDevices" else key
            if (field, value) in seen:
                ctx.fail(f"{path}.{key}", f"duplicate {field} {value} (also {seen[field, value]})")
            seen[field, value] = f"{path}.{key}"
        if gpu.index != i:
            ctx.fail(f"{path}.index", f"expected {i}: GPUs are listed in index order from 0")
    return gpus


def _read_topology(ctx: Ctx, raw: Any, count: int, fabric: NvlinkFabric) -> LinkMatrix:
    rows = ctx.as_list(raw, "topology")
    if len(rows) != count:
        ctx.fail(
            "topology",
            f"{counted(len(rows), 'row')} for {counted(count, 'GPU')} (the matrix must be square)",
        )
    cells = [[_cell(ctx, rows, i, j, count) for j in range(count)] for i in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            if cells[i][j] != cells[j][i]:
                ctx.fail(
                    f"topology[{j}][{i}]",
                    f"{cells[j][i].cell} differs from topology[{i}][{j}] {cells[i][j].cell} "
                    "(the matrix must be symmetric)",
                )
    matrix = LinkMatrix(
        tuple(tuple(None if i == j else c for j, c in enumerate(r)) for i, r in enumerate(cells))
    )
    _check_fabric(ctx, matrix, fabric)
    return matrix


def _cell(ctx: Ctx, rows: Sequence[Any], i: int, j: int, count: int) -> GpuLink:
    row = ctx.as_list(rows[i], f"topology[{i}]")
    if len(row) != count:
        ctx.fail(
            f"topology[{i}]",
            f"{counted(len(row), 'cell')} in a row, expected {count} (the matrix must be square)",
        )
    text = ctx.as_str(row[j], f"topology[{i}][{j}]")
    if i == j:
        if text != "X":
            ctx.fail(f"topology[{i}][{j}]", f"the diagonal must be X, got {text!r}")
        return GpuLink()
    try:
        return GpuLink.from_cell(text)
    except ValueError:
        ctx.fail(
            f"topology[{i}][{j}]",
            f"{text!r} is not in the topo -m legend "
            "(X on the diagonal; NV<k>, PIX, PXB, PHB, NODE, SYS elsewhere)",
        )


def _check_fabric(ctx: Ctx, matrix: LinkMatrix, fabric: NvlinkFabric) -> None:
    """The NV<k> cells must be wireable the way `nvlinkFabric` says."""
    n = matrix.size
    nv = [[matrix.link(i, j).nvlinks if i != j else 0 for j in range(n)] for i in range(n)]
    for i in range(n):
        for j in range(n):
            if nv[i][j] and fabric is NvlinkFabric.NONE:
                ctx.fail(
                    f"topology[{i}][{j}]", f"NV{nv[i][j]} needs nvlinkFabric nvswitch or direct"
                )
    if fabric is NvlinkFabric.DIRECT:
        for i in range(n):
            if sum(nv[i]) > NVLINK_MAX_LINKS:
                ctx.fail(
                    f"topology[{i}]",
                    f"{sum(nv[i])} direct NVLinks, more than a GPU has ({NVLINK_MAX_LINKS})",
                )
    if fabric is NvlinkFabric.NVSWITCH:
        ports = [max(row) for row in nv]
        for i in range(n):
            for j in range(n):
                want = min(ports[i], ports[j])
                if i != j and nv[i][j] != want:
                    got = f"NV{nv[i][j]}" if nv[i][j] else matrix.link(i, j).cell
                    expected = f"NV{want}" if want else "a PCIe level"
                    ctx.fail(
                        f"topology[{i}][{j}]",
                        f"{got} cannot come from NVSwitch wiring: GPU{i} has {ports[i]} "
                        f"switch links and GPU{j} {ports[j]}, so the cell is {expected}",
                    )


def _read_events(ctx: Ctx, raw: Any, gpus: Sequence[Gpu]) -> tuple[ScriptedEvent, ...]:
    events = []
    for path, doc, after, gpu in scripted(ctx, raw, "events", gpus, ("giId", "ciId"), ("xid",)):
        gi = doc.get("giId")
        ci = doc.get("ciId")
        events.append(
            ScriptedEvent(
                after_s=after,
                gpu=gpu,
                xid=ctx.as_int(doc["xid"], f"{path}.xid", minimum=1),
                gi_id=None if gi is None else ctx.as_int(gi, f"{path}.giId", minimum=0),
                ci_id=None if ci is None else ctx.as_int(ci, f"{path}.ciId", minimum=0),
            )
        )
    return tuple(sorted(events, key=lambda e: e.after_s))


def to_document(inventory: NodeInventory, events: Iterable[ScriptedEvent] = ()) -> dict[str, Any]:
    """The fixture document (plain dicts and lists) for an inventory."""
    doc: dict[str, Any] = {
        "version": 1,
        "driverVersion": inventory.driver_version,
        "cudaDriverVersion": inventory.cuda_driver_version,
        "nvlinkFabric": str(inventory.nvlink_fabric),
        "numa": [_numa_doc(n) for n in inventory.numa_nodes],
        "gpus": [_gpu_doc(g) for g in inventory.gpus],
        "topology": [list(row) for row in inventory.links.cells()],
    }
    if not inventory.numa_nodes:
        del doc["numa"]
    event_docs = [_event_doc(e) for e in events]
    if event_docs:
        doc["events"] = event_docs
    return doc


def _numa_doc(node: NumaNode) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": node.id, "cpus": node.cpulist, "memoryMiB": node.memory_mib}
    if node.hugepages:
        doc["hugepages"] = dict(node.hugepages)
    doc["distances"] = list(node.distances)
    return doc


def _gpu_doc(gpu: Gpu) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.product,
        "memoryMiB": gpu.memory_mib,
        **({"memoryReservedMiB": gpu.memory_reserved_mib} if gpu.memory_reserved_mib else {}),
        "pciBusId": gpu.pci_bus_id,
        "minor": gpu.minor,
        "numaNode": -1 if gpu.numa_node is None else gpu.numa_node,
    }
    if gpu.memory_affinity:
        doc["memoryAffinity"] = list(gpu.memory_affinity)
    if gpu.fabric is not None:
        doc["fabric"] = {
            "clusterUuid": gpu.fabric.cluster_uuid,
            "cliqueId": gpu.fabric.clique_id,
            "state": str(gpu.fabric.state),
            "status": gpu.fabric.status,
        }
    return doc | {
        "computeCapability": gpu.compute_capability,
        "migMode": str(gpu.mig_mode),
        "migDevices": [
            {
                "profile": m.profile,
                "uuid": m.uuid,
                "giId": m.gi_id,
                "ciId": m.ci_id,
                "memoryMiB": m.memory_mib,
                "start": m.start,
                "size": m.size,
            }
            for m in gpu.mig_devices
        ],
    }


def _event_doc(event: ScriptedEvent) -> dict[str, Any]:
    doc: dict[str, Any] = {"afterSeconds": event.after_s, "gpu": event.gpu, "xid": event.xid}
    if event.gi_id is not None:
        doc["giId"] = event.gi_id
    if event.ci_id is not None:
        doc["ciId"] = event.ci_id
    return doc


def dump(inventory: NodeInventory, events: Iterable[ScriptedEvent] = (), fmt: str = "yaml") -> str:
    """The fixture text (`yaml` or `json`) that loads back to an equal inventory."""
    doc = to_document(inventory, events)
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=200)


def fixture_from_mapping(data: Mapping[str, Any], source: str = "<memory>") -> Fixture:
    """Build a fixture from an in-memory document (tests and tools)."""
    return parse_fixture(dict(data), source)
