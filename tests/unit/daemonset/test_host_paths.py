"""What the agent may see of the host: hostPaths that never create host directories (but the MPS
root, read-only, and the agent's own state directory), only the sysfs the code reads (and
enough of it: checked by reading a sysfs tree through the mounts), and the CDI spec directories
only with the optional cdi-cri component."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agent.cli.config import load
from agent.nvml import sysfs
from agent.nvml.fixture import load_fixture
from tests.builders import manifests as checks
from tests.builders import render as r

CDI = r.OPTIONAL / "cdi"
CREATING_TYPES = {"", "DirectoryOrCreate", "FileOrCreate"}  # "" (unset) lets the runtime mkdir


def _agent_pod(objects) -> r.Obj:
    return r.pod_specs(r.one(objects, "DaemonSet", "gputopo-agent"))[0]


def _host_mounts(pod: r.Obj) -> dict[str, str]:
    """mountPath -> host path, for the hostPath mounts of the agent container."""
    volumes = {v["name"]: v for v in pod["volumes"] if "hostPath" in v}
    container = pod["containers"][0]
    return {
        m["mountPath"]: volumes[m["name"]]["hostPath"]["path"]
        for m in container["volumeMounts"]
        if m["name"] in volumes
    }


@pytest.fixture(scope="module")
def with_cdi() -> tuple[r.Obj, ...]:
    try:
        return tuple(r.render_with_components(CDI))
    except LookupError:
        pytest.skip("kubectl is not installed: components cannot be rendered")


def _creating_host_paths(install) -> dict[str, str]:
    volumes = [v for v in _agent_pod(install)["volumes"] if "hostPath" in v]
    types = {v["name"]: v["hostPath"].get("type", "") for v in volumes}
    return {name: kind for name, kind in types.items() if kind in CREATING_TYPES}


MAY_CREATE = {"mps-root": "DirectoryOrCreate", "state": "DirectoryOrCreate"}
"""The MPS root, which the optional MPS DaemonSet creates the same way: `Directory` would keep the
agent from starting on GPU nodes without MPS (agent-daemonset.yaml says why); and the agent's own
state directory (its record of what each share container was given), which nothing else makes."""


def test_no_host_path_can_create_a_host_directory_but_the_mps_root_and_the_state(objects):
    assert _creating_host_paths(objects) == MAY_CREATE


def test_nor_with_the_cdi_component(with_cdi):
    assert _creating_host_paths(with_cdi) == MAY_CREATE


def _host_sysfs(root: Path) -> tuple[Path, dict[str, int | None]]:
    """A host /sys as the kernel lays it out: bus/pci/devices/<bdf> are relative symlinks into
    devices/pci<domain>:<bus>/...; plus parts the agent must not need (kernel/, fs/, class/)."""
    inventory = load_fixture("dgx-h100").inventory
    numa = {g.pci_bus_id: g.numa_node for g in inventory.gpus}
    sysfs.write_host_root(root, inventory.numa_nodes, numa)
    pci = root / "sys" / "bus" / "pci" / "devices"
    for entry in sorted(pci.iterdir()):
        target = root / "sys" / "devices" / "pci0000:00" / entry.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(entry, target)
        entry.symlink_to(os.path.relpath(target, pci))
    for other in ("kernel/security", "fs/cgroup", "class/net"):
        (root / "sys" / other).mkdir(parents=True)
    return root, numa


def _container_view(host: Path, mounts: dict[str, str], into: Path) -> Path:
    """The container's file tree made of just these bind mounts (symlinks kept as they are)."""
    for mount_path, host_path in mounts.items():
        shutil.copytree(host / host_path.lstrip("/"), into / mount_path.lstrip("/"), symlinks=True)
    return into


def _reads(root: Path, numa: dict[str, int | None]) -> tuple[object, ...]:
    return (sysfs.numa_nodes(root), {b: sysfs.gpu_numa_node(root, b) for b in numa})


def test_the_sysfs_mounts_give_the_agent_everything_it_reads(objects, tmp_path):
    host, numa = _host_sysfs(tmp_path / "host")
    sys_mounts = {
        m: h for m, h in _host_mounts(_agent_pod(objects)).items() if h.startswith("/sys")
    }
    assert sorted(sys_mounts.values()) == ["/sys/bus/pci/devices", "/sys/devices"]
    view = _container_view(host, sys_mounts, tmp_path / "container")
    flags = checks.parse_flags(_agent_pod(objects)["containers"][0]["args"])
    seen = _reads(view / str(flags["--host-root"]).lstrip("/"), numa)
    assert seen == _reads(host, numa)
    assert len(seen[0]) == 2  # two NUMA nodes
    assert set(seen[1].values()) == {0, 1}  # GPUs on both
    assert not (view / "host" / "sys" / "kernel").exists()


@pytest.mark.parametrize("left_out", ["/sys/devices", "/sys/bus/pci/devices"])
def test_each_sysfs_mount_is_needed(objects, tmp_path, left_out):
    host, numa = _host_sysfs(tmp_path / "host")
    mounts = {m: h for m, h in _host_mounts(_agent_pod(objects)).items() if h.startswith("/sys")}
    fewer = {m: h for m, h in mounts.items() if h != left_out}
    view = _container_view(host, fewer, tmp_path / "container")
    assert _reads(view / "host", numa) != _reads(host, numa)


def test_cdi_component_turns_on_cdi_cri_with_read_only_existing_dirs(with_cdi, tmp_path):
    pod = _agent_pod(with_cdi)
    container = pod["containers"][0]
    mounts = _host_mounts(pod)
    assert {m: mounts[m] for m in ("/etc/cdi", "/var/run/cdi")} == {
        "/etc/cdi": "/etc/cdi",
        "/var/run/cdi": "/var/run/cdi",
    }
    cdi_volumes = [v for v in pod["volumes"] if v["name"].startswith("cdi-")]
    assert {v["hostPath"]["type"] for v in cdi_volumes} == {"Directory"}
    read_only = {m["mountPath"] for m in container["volumeMounts"] if m.get("readOnly")}
    assert {"/etc/cdi", "/var/run/cdi"} <= read_only
    args = [a for a in container["args"][1:] if not a.startswith("--config=")]
    config_file = tmp_path / "agent.yaml"
    config_file.write_text("version: v1\n", encoding="utf-8")
    config = load([*args, f"--config={config_file}"], {"NODE_NAME": "n1"})
    assert [str(s) for s in config.plugin.device_list_strategies] == ["cdi-cri"]
    assert {str(p) for p in config.plugin.cdi_spec_dirs} <= set(mounts)
