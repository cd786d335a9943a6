"""The real backend running over the fake pynvml: link counting, MIG, errors, health, events."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from agent.errors import GpuLost, NvmlError, NvmlNotSupported, NvmlUnavailable
from agent.inventory import discover
from agent.model import GpuLink, GpuUuid, MigDevice, MigUuid, NvlinkFabric, TopoLevel
from agent.nvml.backend import GpuStatus, NvmlBackend, XidEvent
from agent.nvml.fake_pynvml import FakePynvml
from agent.nvml.fixture import load_fixture
from agent.nvml.pynvml_backend import PynvmlBackend, open_backend, translate
from tests.builders.clock import FakeClock
from tests.builders.nvml import HAS_DRIVER, BackendFor, node_doc, variant


def test_pynvml_backend_implements_the_protocol(tmp_path: Path) -> None:
    _: NvmlBackend = PynvmlBackend(nvml=FakePynvml(load_fixture("single-t4")), host_root=tmp_path)
    assert _.gpus()[0].product == "Tesla T4"
    _.close()


@pytest.mark.parametrize(
    ("name", "cell"), [("dgx-a100", "NV12"), ("dgx-h100", "NV18"), ("dgx-2", "NV6")]
)
def test_nvswitch_pairs_count_the_smaller_side_of_switch_links(
    backend_for: BackendFor, name: str, cell: str
) -> None:
    backend, _ = backend_for(name)
    inv = discover(backend)
    backend.close()
    assert {c for row in inv.links.cells() for c in row} == {"X", cell}
    assert inv.nvlink_fabric is NvlinkFabric.NVSWITCH


def test_nvswitch_gpu_with_fewer_links_gets_the_minimum(backend_for: BackendFor) -> None:
    doc = node_doc(gpus=3)
    doc["topology"] = [["X", "NV12", "NV4"], ["NV12", "X", "NV4"], ["NV4", "NV4", "X"]]
    backend, _ = backend_for(doc)
    links = backend.links(backend.gpus())
    assert (links.link(0, 1).nvlinks, links.link(0, 2).nvlinks, links.link(2, 1).nvlinks) == (
        12,
        4,
        4,
    )


def test_direct_links_are_counted_per_peer(backend_for: BackendFor) -> None:
    backend, _ = backend_for("dgx-1p")
    links = backend.links(backend.gpus())
    assert [links.link(0, j).cell for j in range(1, 8)] == ["NV1"] * 4 + ["SYS"] * 3
    assert links == load_fixture("dgx-1p").inventory.links
    assert backend.nvlink_fabric() is NvlinkFabric.DIRECT


def test_link_without_nvlink_support_falls_back_to_the_pcie_level(backend_for: BackendFor) -> None:
    backend, fake = backend_for("pcie-4x-nvlink-pairs")
    fake.fail("nvmlDeviceGetNvLinkState", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=0)
    links = backend.links(backend.gpus())
    assert links.link(0, 1) == GpuLink(level=TopoLevel.NODE)
    assert links.link(2, 3) == GpuLink(nvlinks=12)


def test_unknown_remote_type_still_counts_direct_links_but_not_switch_ones(
    backend_for: BackendFor,
) -> None:
    p100, fake = backend_for("dgx-1p")
    fake.fail("nvmlDeviceGetNvLinkRemoteDeviceType", pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert p100.links(p100.gpus()) == load_fixture("dgx-1p").inventory.links
    a100, fake = backend_for("dgx-a100")
    fake.fail("nvmlDeviceGetNvLinkRemoteDeviceType", pynvml.NVML_ERROR_NOT_SUPPORTED)
    links = a100.links(a100.gpus())
    assert links.link(0, 1) == GpuLink(level=TopoLevel.NODE)
    assert links.link(0, 2) == GpuLink(level=TopoLevel.SYS)


def test_mig_devices_are_enumerated_skipping_empty_slots(backend_for: BackendFor) -> None:
    backend, _ = backend_for("dgx-a100-mig")
    gpus = backend.gpus()
    assert gpus == load_fixture("dgx-a100-mig").inventory.gpus
    assert [(m.profile, m.gi_id, m.start, m.size) for m in gpus[2].mig_devices] == [
        ("4g.40gb", 1, 0, 4),
        ("3g.40gb", 2, 4, 4),
    ]
    assert gpus[5].mig_devices == ()


def test_a_new_mig_layout_is_seen_on_the_next_scan(backend_for: BackendFor) -> None:
    backend, fake = backend_for("dgx-a100-mig")
    whole = MigDevice(
        uuid=MigUuid("MIG-whole"),
        profile="7g.80gb",
        gi_id=0,
        ci_id=0,
        memory_mib=80384,
        start=0,
        size=8,
        multiprocessors=98,
    )
    fake.set_mig_devices(3, [whole])
    assert backend.gpus()[3].mig_devices == (whole,)


@pytest.mark.parametrize(
    ("fixture", "gpu", "sms"),
    [
        pytest.param("dgx-a100-mig", 2, [56, 42], id="A100 80GB: 4g and 3g"),
        pytest.param("dgx-a100-mig", 1, [42, 28, 14], id="A100 80GB: 3g, 2g and 1g"),
    ],
)
def test_a_mig_device_counts_its_profiles_multiprocessors(
    backend_for: BackendFor, fixture: str, gpu: int, sms: list[int]
) -> None:
    backend, _ = backend_for(fixture)
    assert [m.multiprocessors for m in backend.gpus()[gpu].mig_devices] == sms


def test_a_profile_nvml_does_not_name_leaves_the_multiprocessors_unsaid(
    backend_for: BackendFor,
) -> None:
    backend, fake = backend_for("dgx-a100-mig")
    fake.fail("nvmlDeviceGetGpuInstanceProfileInfo", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=2)
    migs = backend.gpus()[2].mig_devices
    assert [(m.profile, m.multiprocessors) for m in migs] == [("4g.40gb", 0), ("3g.40gb", 0)]


def test_a_failing_slot_lookup_is_an_error_naming_the_gpu(backend_for: BackendFor) -> None:
    backend, fake = backend_for("dgx-a100-mig")
    fake.fail("nvmlDeviceGetMigDeviceHandleByIndex", pynvml.NVML_ERROR_UNKNOWN, gpu=2)
    with pytest.raises(NvmlError) as info:
        backend.gpus()
    assert type(info.value) is NvmlError
    assert (info.value.code, str(info.value)) == (999, "GPU 2: NVML error 999 (Unknown Error)")


@pytest.mark.parametrize(
    ("code", "error", "message"),
    [
        pytest.param(
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            NvmlUnavailable,
            "NVML Shared Library Not Found",
            id="no library",
        ),
        pytest.param(
            pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
            NvmlUnavailable,
            "Driver Not Loaded",
            id="no driver",
        ),
        pytest.param(
            pynvml.NVML_ERROR_NO_PERMISSION,
            NvmlError,
            "Insufficient Permissions",
            id="no permission",
        ),
    ],
)
def test_init_errors_are_translated(
    code: int, error: type[NvmlError], message: str, tmp_path: Path
) -> None:
    fake = FakePynvml(load_fixture("single-t4"))
    fake.fail("nvmlInit", code)
    with pytest.raises(error) as info:
        PynvmlBackend(nvml=fake, host_root=tmp_path)
    assert type(info.value) is error
    assert str(info.value) == f"nvmlInit: NVML error {code} ({message})"


@pytest.mark.parametrize(
    ("function", "code", "error"),
    [
        pytest.param("nvmlDeviceGetUUID", pynvml.NVML_ERROR_GPU_IS_LOST, GpuLost, id="lost"),
        pytest.param(
            "nvmlDeviceGetName", pynvml.NVML_ERROR_RESET_REQUIRED, GpuLost, id="reset required"
        ),
        pytest.param(
            "nvmlDeviceGetMemoryInfo",
            pynvml.NVML_ERROR_NOT_SUPPORTED,
            NvmlNotSupported,
            id="not supported",
        ),
        pytest.param(
            "nvmlDeviceGetMinorNumber", pynvml.NVML_ERROR_NO_PERMISSION, NvmlError, id="other"
        ),
    ],
)
def test_device_errors_are_translated_at_the_boundary(
    backend_for: BackendFor, function: str, code: int, error: type[NvmlError]
) -> None:
    backend, fake = backend_for("dgx-h100")
    fake.fail(function, code, gpu=1)
    with pytest.raises(error, match=rf"^GPU 1: NVML error {code} \(") as info:
        backend.gpus()
    assert type(info.value) is error
    assert info.value.code == code
    assert isinstance(info.value.__cause__, fake.NVMLError)


def test_translate_understands_the_real_pynvml_classes() -> None:
    assert type(translate(pynvml.NVMLError_GpuIsLost(), "x")) is GpuLost
    assert type(translate(pynvml.NVMLError_NotSupported(), "x")) is NvmlNotSupported
    assert type(translate(pynvml.NVMLError_LibraryNotFound(), "x")) is NvmlUnavailable
    assert type(translate(pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT), "x")).__name__ == "NvmlError"


@pytest.mark.skipif(HAS_DRIVER, reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_a_driver_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(NvmlUnavailable) as info:
        open_backend(None, tmp_path)
    assert info.value.code in (
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    )


def test_status_reports_lost_remap_pending_and_silent_gpus(backend_for: BackendFor) -> None:
    backend, fake = backend_for("dgx-h100")
    uuids = [g.uuid for g in backend.gpus()]
    fake.set_lost(1)
    fake.set_remap_pending(2)
    fake.fail("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_UNKNOWN, gpu=3)
    assert [backend.status(u) for u in uuids[:4]] == [
        GpuStatus(responds=True, lost=False, remap_pending=False),
        GpuStatus(responds=False, lost=True, remap_pending=False),
        GpuStatus(responds=True, lost=False, remap_pending=True),
        GpuStatus(responds=False, lost=False, remap_pending=False),
    ]


def test_status_without_a_row_remapper_is_not_pending(backend_for: BackendFor) -> None:
    backend, fake = backend_for("dgx-1p")
    fake.set_remap_pending(0)
    assert backend.status(backend.gpus()[0].uuid).remap_pending is False


def test_telemetry_reads_values_and_leaves_unsupported_ones_none(backend_for: BackendFor) -> None:
    backend, fake = backend_for("dgx-a100-mig")
    gpus = backend.gpus()
    fake.set_telemetry(6, utilization=57, memory_used_mib=2048, temperature_c=61, power_w=312.5)
    reading = backend.telemetry(gpus[6].uuid)
    assert (reading.utilization_percent, reading.memory_used_mib) == (57, 2048)
    assert (reading.temperature_c, reading.power_w) == (61, 312.5)
    assert backend.telemetry(gpus[0].uuid).utilization_percent is None


def test_wait_xid_returns_scripted_events_then_times_out(backend_for: BackendFor) -> None:
    clock = FakeClock()
    backend, fake = backend_for("dgx-a100-mig", clock=clock, sleep=clock.sleep)
    uuids = [g.uuid for g in backend.gpus()]
    assert backend.wait_xid(25.0) == XidEvent(gpu_uuid=uuids[0], xid=13, gi_id=11, ci_id=0)
    assert backend.wait_xid(1.0) is None
    assert clock.now == 1021.0
    assert backend.wait_xid(60.0) == XidEvent(gpu_uuid=uuids[5], xid=79)
    fake.emit_xid(7, 48)
    assert backend.wait_xid(0.0) == XidEvent(gpu_uuid=uuids[7], xid=48)


def test_xid_of_a_gpu_that_fell_off_the_bus_still_names_it(backend_for: BackendFor) -> None:
    clock = FakeClock()
    backend, fake = backend_for("dgx-a100", clock=clock, sleep=clock.sleep)
    uuids = [g.uuid for g in backend.gpus()]
    assert backend.wait_xid(0.0) is None  # event set registered while every GPU answers
    fake.set_lost(3)
    fake.emit_xid(3, 79)
    assert backend.wait_xid(0.0) == XidEvent(gpu_uuid=uuids[3], xid=79)


def test_gpus_that_cannot_report_events_are_not_watched(backend_for: BackendFor) -> None:
    clock = FakeClock()
    backend, fake = backend_for("dgx-a100-mig", clock=clock, sleep=clock.sleep)
    fake.fail("nvmlDeviceGetSupportedEventTypes", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=5)
    assert backend.wait_xid(25.0) is not None
    assert backend.wait_xid(60.0) is None


def test_close_shuts_nvml_down_and_removes_the_fake_host_root(backend_for: BackendFor) -> None:
    backend, fake = backend_for("single-t4")
    root = backend.host_root
    assert (root / "sys/devices/system/node/node0/cpulist").read_text() == "0-3\n"
    backend.wait_xid(0.0)
    backend.close()
    assert not root.exists()
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    backend.close()
    assert not root.exists()


def test_numa_nodes_come_from_sysfs_under_the_host_root(backend_for: BackendFor) -> None:
    backend, _ = backend_for("dgx-a100")
    nodes = backend.numa_nodes()
    assert [n.id for n in nodes] == list(range(8))
    assert nodes[5].cpulist == "80-95,208-223"
    assert nodes[5].distances == (32, 32, 32, 32, 12, 10, 12, 12)
    assert nodes[5].hugepages == (("2Mi", 0), ("1Gi", 0))
    assert [g.numa_node for g in backend.gpus()] == [3, 3, 1, 1, 7, 7, 5, 5]


def test_driver_versions_are_reported(backend_for: BackendFor) -> None:
    backend, _ = backend_for("dgx-h100")
    assert (backend.driver_version(), backend.cuda_driver_version()) == ("550.90.07", 12040)
    assert backend.gpus()[0].uuid == GpuUuid(load_fixture("dgx-h100").inventory.gpus[0].uuid)


def test_a_driver_without_the_row_remapper_call_is_not_pending(backend_for: BackendFor) -> None:
    backend, fake = backend_for("dgx-h100")
    fake.set_remap_pending(0)
    fake.fail("nvmlDeviceGetRemappedRows", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    assert backend.status(backend.gpus()[0].uuid) == GpuStatus(
        responds=True, lost=False, remap_pending=False
    )


def test_memory_affinity_is_read_where_nvml_answers_it(backend_for: BackendFor) -> None:
    doc = variant(variant(node_doc(), "gpus[0].numaNode", -1), "gpus[0].memoryAffinity", [1])
    backend, fake = backend_for(doc)
    gpus = backend.gpus()
    assert [(g.numa_node, g.memory_affinity) for g in gpus] == [(None, (1,)), (0, ())]
    fake.fail("nvmlDeviceGetMemoryAffinity", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, times=1)
    assert backend.gpus()[0].memory_affinity == ()  # an older driver: as if NVML did not say
    fake.fail("nvmlDeviceGetMemoryAffinity", pynvml.NVML_ERROR_UNKNOWN, gpu=0, times=1)
    with pytest.raises(NvmlError, match=r"^nvmlDeviceGetMemoryAffinity: NVML error 999"):
        backend.gpus()


def test_reserved_memory_comes_from_memory_info_v2_and_shares_split_what_is_left(
    backend_for: BackendFor,
) -> None:
    """DESIGN §12: a GPU's share capacity is NVML's total less its reserved memory."""
    doc = variant(node_doc(gpus=2), "gpus[0].memoryReservedMiB", 559)
    backend, fake = backend_for(doc)
    gpus = backend.gpus()
    assert [(g.memory_mib, g.memory_reserved_mib) for g in gpus] == [(81920, 559), (81920, 0)]
    assert gpus[0].usable_memory_mib == 81920 - 559
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    v2 = fake.nvmlDeviceGetMemoryInfo(handle, fake.nvmlMemory_v2)
    assert (v2.total, v2.reserved, v2.free) == (81920 << 20, 559 << 20, (81920 - 559) << 20)
    with pytest.raises(NotImplementedError, match="version 3"):
        fake.nvmlDeviceGetMemoryInfo(handle, 3)


def test_reserved_memory_rounds_up_to_whole_mib(backend_for: BackendFor, monkeypatch) -> None:
    """An H200's driver reserves 615.x MiB; nvidia-smi shows 616 and so does the inventory, so
    the usable memory is never over by the part MiB (seen on a real H200, tests/gpu)."""
    backend, fake = backend_for(node_doc(gpus=1))
    exact = fake.nvmlDeviceGetMemoryInfo

    def reserving(handle, version=None):
        info = exact(handle, version)
        if version is None:
            return info
        return replace(info, reserved=(615 << 20) + 4096, free=info.free - (615 << 20) - 4096)

    monkeypatch.setattr(fake, "nvmlDeviceGetMemoryInfo", reserving)
    (gpu,) = backend.gpus()
    assert (gpu.memory_reserved_mib, gpu.usable_memory_mib) == (616, gpu.memory_mib - 616)
