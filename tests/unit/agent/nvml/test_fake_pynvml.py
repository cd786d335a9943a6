"""The fake pynvml: pynvml's names, codes and struct attributes, answering from fixtures."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pynvml
import pytest

from agent.model import MigDevice, MigUuid
from agent.nvml import fake_structs, sysfs
from agent.nvml.fake_pynvml import FakePynvml, write_fake_host_root
from agent.nvml.fixture import fixture_from_mapping, load_fixture
from tests.builders.clock import FakeClock
from tests.builders.nvml import node_doc, variant


def _fake(name: str, **options: object) -> FakePynvml:
    fake = FakePynvml(load_fixture(name), **options)  # type: ignore[arg-type]
    fake.nvmlInit()
    return fake


@pytest.mark.parametrize(("name", "code", "_text"), fake_structs.ERROR_CODES)
def test_error_classes_and_codes_are_pynvml_s(name: str, code: int, _text: str) -> None:
    fake = FakePynvml(load_fixture("single-t4"))
    real_cls = getattr(pynvml, f"NVMLError_{name}")
    fake_cls = getattr(fake, f"NVMLError_{name}")
    assert real_cls().value == code
    assert fake_cls().value == code
    err = fake.NVMLError(code)
    assert type(err) is fake_cls
    assert isinstance(err, fake.NVMLError)
    assert err.value == code


def test_error_messages_match_pynvml_where_pynvml_has_one() -> None:
    for _, code, text in fake_structs.ERROR_CODES:
        real = str(pynvml.NVMLError(code))
        if not real.startswith("NVML Error with code"):
            assert text == real


def test_constants_are_pynvml_s() -> None:
    names = [n for n in dir(fake_structs) if n.startswith(("NVML_", "nvmlEvent"))]
    assert len(names) > 30
    assert {n: getattr(fake_structs, n) for n in names} == {n: getattr(pynvml, n) for n in names}


def test_unmodelled_calls_raise_not_implemented() -> None:
    fake = _fake("single-t4")
    with pytest.raises(NotImplementedError, match="does not model nvmlDeviceGetFanSpeed"):
        fake.nvmlDeviceGetFanSpeed(fake.nvmlDeviceGetHandleByIndex(0))
    with pytest.raises(AttributeError):
        _ = fake.not_an_nvml_name


def test_calls_before_init_raise_uninitialized() -> None:
    fake = FakePynvml(load_fixture("single-t4"))
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 1
    fake.nvmlShutdown()
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_nvswitch_wiring_gives_each_gpu_switch_links() -> None:
    fake = _fake("dgx-a100")
    h = fake.nvmlDeviceGetHandleByIndex(3)
    kinds = {fake.nvmlDeviceGetNvLinkRemoteDeviceType(h, link) for link in range(12)}
    assert kinds == {pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH}
    switches = {fake.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId for link in range(12)}
    assert len(switches) == 6
    assert fake.nvmlDeviceGetNvLinkState(h, 11) == pynvml.NVML_FEATURE_ENABLED
    with pytest.raises(fake.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetNvLinkState(h, 12)


def test_direct_wiring_points_links_at_the_peer() -> None:
    fake = _fake("pcie-4x-nvlink-pairs")
    h2 = fake.nvmlDeviceGetHandleByIndex(2)
    remotes = {fake.nvmlDeviceGetNvLinkRemotePciInfo(h2, link).busId for link in range(12)}
    assert remotes == {"00000000:E3:00.0"}
    assert fake.nvmlDeviceGetNvLinkRemoteDeviceType(h2, 0) == pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
    assert fake.nvmlDeviceGetPciInfo(h2).busIdLegacy == "0000:CA:00.0"


def test_gpu_without_nvlink_says_not_supported() -> None:
    fake = _fake("single-t4")
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(fake.nvmlDeviceGetHandleByIndex(0), 0)


def test_mig_slots_hold_devices_at_their_start_and_empty_slots_raise_not_found() -> None:
    fake = _fake("dgx-a100-mig")
    parent = fake.nvmlDeviceGetHandleByIndex(2)
    assert fake.nvmlDeviceGetMigMode(parent) == [1, 1]
    assert fake.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    found = []
    for slot in range(7):
        try:
            found.append((slot, fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)))
        except fake.NVMLError_NotFound:
            continue
    assert [slot for slot, _ in found] == [0, 4]
    mig = found[1][1]
    assert fake.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert fake.nvmlDeviceGetMemoryInfo(mig).total == 40192 << 20
    info = fake.nvmlGpuInstanceGetInfo(fake.nvmlDeviceGetGpuInstanceById(parent, 2))
    assert (info.profileId, info.placement.start, info.placement.size) == (9, 4, 4)
    with pytest.raises(fake.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 7)


def test_gpu_instance_profile_info_is_named_and_needs_mig_enabled() -> None:
    fake = _fake("dgx-a100-mig")
    info = fake.nvmlDeviceGetGpuInstanceProfileInfo(fake.nvmlDeviceGetHandleByIndex(0), 9)
    assert (info.id, info.name, info.sliceCount, info.instanceCount) == (15, "MIG 1g.20gb", 1, 4)
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetGpuInstanceProfileInfo(fake.nvmlDeviceGetHandleByIndex(5), 0)
    volta = _fake("dgx-2")
    with pytest.raises(volta.NVMLError_NotSupported):
        volta.nvmlDeviceGetMigMode(volta.nvmlDeviceGetHandleByIndex(0))


def test_injected_failure_counts_down_and_can_target_one_gpu() -> None:
    fake = _fake("dgx-h100")
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    fake.fail("nvmlDeviceGetUUID", pynvml.NVML_ERROR_NO_PERMISSION, gpu=1, times=1)
    assert fake.nvmlDeviceGetUUID(h0).startswith("GPU-")
    with pytest.raises(fake.NVMLError_NoPermission):
        fake.nvmlDeviceGetUUID(h1)
    assert fake.nvmlDeviceGetUUID(h1).startswith("GPU-")


def test_lost_gpu_fails_every_call_until_it_comes_back() -> None:
    fake = _fake("dgx-h100")
    fake.set_lost(4)
    with pytest.raises(fake.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetHandleByIndex(4)
    assert fake.nvmlDeviceGetName(fake.nvmlDeviceGetHandleByIndex(3)) == "NVIDIA H100 80GB HBM3"
    fake.set_lost(4, lost=False)
    assert fake.nvmlDeviceGetIndex(fake.nvmlDeviceGetHandleByIndex(4)) == 4


def test_scripted_events_fire_by_the_injected_clock() -> None:
    clock = FakeClock()
    fake = _fake("dgx-a100-mig", clock=clock, sleep=clock.sleep)
    es = fake.nvmlEventSetCreate()
    for gpu in (0, 5):
        fake.nvmlDeviceRegisterEvents(
            fake.nvmlDeviceGetHandleByIndex(gpu), pynvml.nvmlEventTypeXidCriticalError, es
        )
    first = fake.nvmlEventSetWait(es, 60_000)
    assert (first.eventData, first.gpuInstanceId, first.computeInstanceId) == (13, 11, 0)
    assert clock.now == 1020.0
    with pytest.raises(fake.NVMLError_Timeout):
        fake.nvmlEventSetWait(es, 5_000)
    assert clock.now == 1025.0
    second = fake.nvmlEventSetWait(es, 60_000)
    assert (second.device.gpu, second.eventData, second.gpuInstanceId) == (5, 79, 0xFFFFFFFF)
    assert clock.now == 1030.0


def test_events_for_unregistered_gpus_are_not_delivered() -> None:
    clock = FakeClock()
    fake = _fake("dgx-a100-mig", clock=clock, sleep=clock.sleep)
    es = fake.nvmlEventSetCreate()
    fake.nvmlDeviceRegisterEvents(
        fake.nvmlDeviceGetHandleByIndex(5), pynvml.nvmlEventTypeXidCriticalError, es
    )
    assert fake.nvmlEventSetWait(es, 60_000).eventData == 79
    fake.emit_xid(1, 48)
    with pytest.raises(fake.NVMLError_Timeout):
        fake.nvmlEventSetWait(es, 1_000)


def test_emitted_xid_wakes_a_waiting_thread() -> None:
    fake = _fake("dgx-h100")
    es = fake.nvmlEventSetCreate()
    fake.nvmlDeviceRegisterEvents(
        fake.nvmlDeviceGetHandleByIndex(2), pynvml.nvmlEventTypeXidCriticalError, es
    )
    got: list[int] = []
    waiter = threading.Thread(
        target=lambda: got.append(fake.nvmlEventSetWait(es, 10_000).eventData)
    )
    started = time.monotonic()
    waiter.start()
    fake.emit_xid(2, 94)
    waiter.join(5)
    assert got == [94]
    assert time.monotonic() - started < 5


def test_mig_layout_can_change_under_the_agent() -> None:
    fake = _fake("dgx-a100-mig")
    whole = MigDevice(
        uuid=MigUuid("MIG-7g"),
        profile="7g.80gb",
        gi_id=0,
        ci_id=0,
        memory_mib=80384,
        start=0,
        size=8,
    )
    fake.set_mig_devices(3, [whole])
    parent = fake.nvmlDeviceGetHandleByIndex(3)
    assert fake.nvmlDeviceGetUUID(fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)) == "MIG-7g"
    with pytest.raises(fake.NVMLError_NotFound):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 4)
    with pytest.raises(ValueError, match="GPU 6 is not in MIG mode"):
        fake.set_mig_devices(6, [whole])


def test_telemetry_readings_are_settable() -> None:
    fake = _fake("dgx-h100")
    h = fake.nvmlDeviceGetHandleByIndex(1)
    fake.set_telemetry(1, utilization=57, memory_used_mib=2048, temperature_c=61, power_w=312.5)
    assert fake.nvmlDeviceGetUtilizationRates(h).gpu == 57
    assert fake.nvmlDeviceGetMemoryInfo(h).used == 2048 << 20
    assert fake.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 61
    assert fake.nvmlDeviceGetPowerUsage(h) == 312_500
    with pytest.raises(TypeError, match="unknown reading 'fan'"):
        fake.set_telemetry(1, fan=3)


def test_fake_host_root_is_read_back_by_the_sysfs_code(tmp_path: Path) -> None:
    fx = load_fixture("dgx-h100")
    root = write_fake_host_root(fx, tmp_path)
    assert sysfs.numa_nodes(root) == fx.inventory.numa_nodes
    assert [sysfs.gpu_numa_node(root, g.pci_bus_id) for g in fx.inventory.gpus] == [
        0,
        0,
        0,
        0,
        1,
        1,
        1,
        1,
    ]
    assert (root / "sys/bus/pci/devices/0000:9d:00.0/numa_node").read_text() == "1\n"


def test_memory_affinity_is_the_fixture_s_nodes_as_a_bitmask_else_not_supported() -> None:
    doc = variant(variant(node_doc(), "gpus[0].numaNode", -1), "gpus[0].memoryAffinity", [1])
    fake = FakePynvml(fixture_from_mapping(doc, "t.yaml"))
    fake.nvmlInit()
    gpu0, gpu1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    node_scope = pynvml.NVML_AFFINITY_SCOPE_NODE
    assert list(fake.nvmlDeviceGetMemoryAffinity(gpu0, 2, node_scope)) == [0b10, 0]
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetMemoryAffinity(gpu1, 1, node_scope)
    with pytest.raises(fake.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetMemoryAffinity(gpu0, 1, 7)
    with pytest.raises(NotImplementedError, match="by NUMA node only"):
        fake.nvmlDeviceGetMemoryAffinity(gpu0, 1, pynvml.NVML_AFFINITY_SCOPE_SOCKET)
