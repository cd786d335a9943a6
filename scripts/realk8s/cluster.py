"""A real Kubernetes on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, and
one kubelet with its own containerd. Stdlib only; the binaries come from `build.sh`.

    python3 scripts/realk8s/cluster.py up   [--run-dir DIR] [--node NAME] [--without PART]...
    python3 scripts/realk8s/cluster.py down [--run-dir DIR]
    python3 scripts/realk8s/cluster.py status [--run-dir DIR]

`up` writes DIR/state.json (what tests read: kubeconfigs, the node, the kubelet's sockets and
config, the feature gates turned on) and DIR/admin.kubeconfig, and returns once the API server
answers and the node is Ready. `down` stops everything it started, unmounts what the kubelet and
containerd mounted under DIR, removes the pods' network namespaces and puts back the sysctls the
kubelet changed. One cluster per DIR; `up` on a DIR with a running cluster stops it first.

What this sandbox needs and why is in ../shared/reference/real-kubernetes.md; in short: TLS from a
private CA (openssl), RBAC and the admission plugins a real cluster runs, a bridge CNI network (no
traffic is sent over it: the tier's pods use the host network), `restrict_oom_score_adj`, a
cgroupfs kubelet on cgroup v1 (`failCgroupV1: false`), and images imported from local tarballs.
The kubelet's device-plugin directory is fixed by the kubelet at /var/lib/kubelet/device-plugins,
so one machine runs one kubelet; further nodes are API objects only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import images
import pki

HERE = Path(__file__).resolve().parent
DEFAULT_RUN = Path(os.environ.get("REALK8S_RUN", "/tmp/gputopo-realk8s"))
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
# Gates the project's issues use, turned on where this build knows them (see `_known_gates`);
# REALK8S_GATES (comma-separated, empty: none) replaces them, to start a cluster as a user's
# default one is.
_ISSUE_GATES = (
    "GenericWorkload", "GangScheduling", "TopologyAwareWorkloadScheduling", "CompositePodGroup",
    "WorkloadAwarePreemption", "DRAConsumableCapacity", "DRAPartitionableDevices",
    "DRADeviceTaints", "DRADeviceTaintRules", "DRADeviceBindingConditions",
    "DRAResourceClaimDeviceStatus", "DRAExtendedResource", "DRAWorkloadResourceClaims",
    "ResourceHealthStatus", "DRAListTypeAttributes",
)  # fmt: skip
WANTED_GATES = (
    tuple(g for g in os.environ["REALK8S_GATES"].split(",") if g)
    if "REALK8S_GATES" in os.environ
    else _ISSUE_GATES
)
PARTS = ("kubelet", "controllers", "scheduler")
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
SERVICE_CIDR = "10.96.0.0/24"
POD_CIDR = "10.244.0.0/24"


def log(msg: str) -> None:
    print(f"realk8s: {msg}", file=sys.stderr, flush=True)


def _versions(name: str) -> str:
    """A variable of versions.sh, the one place the versions and the cache folder are set."""
    out = subprocess.run(
        ["bash", "-c", f"source {HERE}/versions.sh; echo ${name}"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip()


def bin_dir() -> Path:
    return Path(_versions("REALK8S_BIN"))


def version() -> str:
    return _versions("K8S_VERSION")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _known_gates(binary: Path) -> set[str]:
    """The feature gates `binary --help` lists (only gates not locked GA are listed)."""
    text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    known = set()
    for line in text.splitlines():
        line = line.strip()
        if "=true|false" in line:
            known.add(line.split("=", 1)[0].removeprefix("kube:"))
    return known


def gate_flag(binary: Path) -> tuple[str, list[str]]:
    known = _known_gates(binary)
    on = [gate for gate in WANTED_GATES if gate in known]
    return ",".join(f"{gate}=true" for gate in on), on


class Launcher:
    """Starts the processes of one cluster and records them in state.json."""

    def __init__(self, run: Path, binaries: Path) -> None:
        self.run, self.bin = run, binaries
        self.state: dict[str, object] = {"run_dir": str(run), "pids": {}, "version": version()}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        logs = self.run / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        out = open(logs / f"{name}.log", "ab")  # noqa: SIM115 (the child keeps it)
        full_env = {**os.environ, "PATH": f"{self.bin}:{os.environ.get('PATH', '')}", **(env or {})}
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
        pids = self.state["pids"]
        assert isinstance(pids, dict)
        pids[name] = proc.pid
        self.state.setdefault("argv", {})[name] = argv  # type: ignore[index]
        self.save()

    def save(self) -> None:
        (self.run / "state.json").write_text(json.dumps(self.state, indent=2))

    def wait_for(self, what: str, check: object, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():  # type: ignore[operator]
                return
            self._dead_check()
            time.sleep(0.5)
        raise SystemExit(f"realk8s: timed out waiting for {what} (logs in {self.run}/logs)")

    def _dead_check(self) -> None:
        pids = self.state["pids"]
        assert isinstance(pids, dict)
        for name, pid in pids.items():
            if not _alive(pid):
                tail = (self.run / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
                raise SystemExit(f"realk8s: {name} exited early; its log ends:\n{tail}")

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.run / 'admin.kubeconfig'}", *args],
            capture_output=True, text=True, check=check,
        )  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as dead
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def start_etcd(launcher: Launcher) -> str:
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    launcher.start("etcd", [
        str(launcher.bin / "etcd"), "--name=gputopo", f"--data-dir={launcher.run / 'etcd'}",
        f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=gputopo=http://127.0.0.1:{peer}",
        "--unsafe-no-fsync=true", "--quota-backend-bytes=8589934592", "--log-level=warn",
    ])  # fmt: skip
    launcher.wait_for("etcd", lambda: _http_ok(f"{url}/health"))
    return url


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def start_apiserver(launcher: Launcher, certs: pki.Certs, etcd: str, port: int) -> None:
    gates, on = gate_flag(launcher.bin / "kube-apiserver")
    launcher.state["feature_gates"] = on
    launcher.state["apiserver"] = f"https://127.0.0.1:{port}"
    launcher.start("kube-apiserver", [
        str(launcher.bin / "kube-apiserver"), f"--etcd-servers={etcd}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--endpoint-reconciler-type=none",
        f"--client-ca-file={certs.ca_crt}", f"--tls-cert-file={certs.crt('apiserver')}",
        f"--tls-private-key-file={certs.key('apiserver')}",
        f"--kubelet-client-certificate={certs.crt('apiserver-kubelet-client')}",
        f"--kubelet-client-key={certs.key('apiserver-kubelet-client')}",
        f"--kubelet-certificate-authority={certs.ca_crt}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--service-account-key-file={certs.sa_pub}",
        f"--service-account-signing-key-file={certs.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
        "--runtime-config=api/all=true", "--allow-privileged=true",
        "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
        f"--feature-gates={gates}", "--v=1",
    ])  # fmt: skip
    launcher.wait_for(
        "kube-apiserver",
        lambda: launcher.kubectl("get", "--raw=/readyz", check=False).returncode == 0,
        timeout=120,
    )


def start_controller_manager(launcher: Launcher, certs: pki.Certs) -> None:
    run = launcher.run
    gates, _ = gate_flag(launcher.bin / "kube-controller-manager")
    launcher.start("kube-controller-manager", [
        str(launcher.bin / "kube-controller-manager"),
        f"--kubeconfig={run / 'kube-controller-manager.kubeconfig'}",
        f"--authentication-kubeconfig={run / 'kube-controller-manager.kubeconfig'}",
        f"--authorization-kubeconfig={run / 'kube-controller-manager.kubeconfig'}",
        "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
        f"--root-ca-file={certs.ca_crt}", f"--service-account-private-key-file={certs.sa_key}",
        "--use-service-account-credentials=true", "--leader-elect=false",
        f"--cluster-signing-cert-file={certs.ca_crt}", f"--cluster-signing-key-file={certs.ca_key}",
        "--controllers=*,-node-ipam-controller",
        f"--feature-gates={gates}", "--v=1",
    ])  # fmt: skip


def start_kube_scheduler(launcher: Launcher) -> None:
    run = launcher.run
    gates, _ = gate_flag(launcher.bin / "kube-scheduler")
    launcher.start("kube-scheduler", [
        str(launcher.bin / "kube-scheduler"), f"--kubeconfig={run / 'kube-scheduler.kubeconfig'}",
        f"--authentication-kubeconfig={run / 'kube-scheduler.kubeconfig'}",
        f"--authorization-kubeconfig={run / 'kube-scheduler.kubeconfig'}",
        "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false",
        f"--feature-gates={gates}", "--v=1",
    ])  # fmt: skip


def write_containerd_config(run: Path, binaries: Path) -> Path:
    base = run / "containerd"
    cni_conf = run / "cni"
    cni_conf.mkdir(parents=True, exist_ok=True)
    (cni_conf / "10-gputopo.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "gputopo-test",
        "plugins": [
            {"type": "bridge", "bridge": "gtopo0", "isGateway": True, "ipMasq": False,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                      "dataDir": str(run / "cni-ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=1))  # fmt: skip
    cni_bin = next(
        p for p in (Path("/usr/lib/cni"), Path("/opt/cni/bin")) if (p / "bridge").exists()
    )
    runc = shutil.which("runc") or "/usr/sbin/runc"
    config = f"""version = 3
root = "{base / "root"}"
state = "{base / "state"}"
[grpc]
  address = "{base / "containerd.sock"}"
[ttrpc]
  address = "{base / "containerd.sock.ttrpc"}"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{images.PAUSE_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["{cni_bin}"]
  conf_dir = "{cni_conf}"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  SystemdCgroup = false
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
"""
    path = base / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config)
    del binaries
    return path


def start_containerd(launcher: Launcher) -> Path:
    config = write_containerd_config(launcher.run, launcher.bin)
    sock = launcher.run / "containerd" / "containerd.sock"
    launcher.start("containerd", [str(launcher.bin / "containerd"), f"--config={config}"])
    launcher.wait_for("containerd", sock.exists)
    ctr = [str(launcher.bin / "ctr"), f"--address={sock}", "--namespace=k8s.io"]
    for tag, tarball in images.write_all(launcher.run / "images").items():
        subprocess.run([*ctr, "images", "import", "--snapshotter=overlayfs", str(tarball)],
                       check=True, capture_output=True)  # fmt: skip
        log(f"imported {tag}")
    launcher.state["containerd_socket"] = str(sock)
    return sock


def kubelet_config(run: Path, node: str, certs: pki.Certs, sock: Path, gates: list[str]) -> Path:
    root = run / "kubelet"
    port, healthz = free_port(), free_port()
    lines = [
        "apiVersion: kubelet.config.k8s.io/v1beta1",
        "kind: KubeletConfiguration",
        "address: 127.0.0.1",
        f"port: {port}",
        "readOnlyPort: 0",
        "healthzBindAddress: 127.0.0.1",
        f"healthzPort: {healthz}",
        "authentication:",
        "  anonymous: {enabled: false}",
        "  webhook: {enabled: false}",
        f"  x509: {{clientCAFile: {certs.ca_crt}}}",
        "authorization: {mode: AlwaysAllow}",
        f"tlsCertFile: {certs.crt(f'kubelet-serving-{node}')}",
        f"tlsPrivateKeyFile: {certs.key(f'kubelet-serving-{node}')}",
        "cgroupDriver: cgroupfs",
        "failCgroupV1: false",
        "failSwapOn: false",
        "protectKernelDefaults: false",
        "rotateCertificates: false",
        "serverTLSBootstrap: false",
        f"containerRuntimeEndpoint: unix://{sock}",
        "evictionHard: {memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, "
        "imagefs.available: 1%}",
        "imageGCHighThresholdPercent: 100",
        "imageGCLowThresholdPercent: 99",
        "maxPods: 250",
        "syncFrequency: 5s",
        "nodeStatusUpdateFrequency: 4s",
        "fileCheckFrequency: 5s",
        f"podCIDR: {POD_CIDR}",
        "resolvConf: /etc/resolv.conf",
        f"podLogsDir: {run / 'pod-logs'}",
        "featureGates:",
        *(f"  {gate}: true" for gate in gates),
    ]
    path = root / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def start_kubelet(launcher: Launcher, certs: pki.Certs, node: str, sock: Path) -> None:
    run = launcher.run
    _, gates = gate_flag(launcher.bin / "kubelet")
    root = run / "kubelet"
    config = kubelet_config(run, node, certs, sock, gates)
    _clear_device_plugin_dir()
    launcher.state["sysctls"] = {
        name: Path(f"/proc/sys/{name}").read_text().strip() for name in SYSCTLS
    }
    launcher.state["node"] = node
    launcher.state["kubelet"] = {
        "root_dir": str(root / "root"),
        "config": str(config),
        "pod_resources_socket": str(root / "root" / "pod-resources" / "kubelet.sock"),
        "device_plugin_dir": str(DEVICE_PLUGIN_DIR),
        "plugins_registry": str(root / "root" / "plugins_registry"),
        "plugins_dir": str(root / "root" / "plugins"),
        "pod_logs_dir": str(run / "pod-logs"),
    }
    launcher.start("kubelet", [
        str(launcher.bin / "kubelet"), f"--config={config}",
        f"--kubeconfig={run / f'kubelet-{node}.kubeconfig'}", f"--root-dir={root / 'root'}",
        f"--cert-dir={root / 'pki'}", f"--hostname-override={node}", "--node-ip=127.0.0.1",
        "--v=1",
    ])  # fmt: skip

    def ready() -> bool:
        answer = launcher.kubectl(
            "get", "node", node, "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False,
        )  # fmt: skip
        return answer.stdout.strip() == "True"

    launcher.wait_for(f"node {node} Ready", ready, timeout=120)


def _clear_device_plugin_dir() -> None:
    """A stale kubelet.sock or checkpoint from an earlier kubelet confuses the next one."""
    if DEVICE_PLUGIN_DIR.exists():
        for entry in DEVICE_PLUGIN_DIR.iterdir():
            if entry.name == "kubelet.sock" or entry.name.startswith("kubelet_internal_checkpoint"):
                entry.unlink()


def up(run: Path, node: str, parts: set[str]) -> None:
    """Start the control plane and the `parts` asked for (kubelet, controllers, scheduler)."""
    binaries = bin_dir()
    if not (binaries / "kube-apiserver").exists():
        raise SystemExit(f"realk8s: no binaries in {binaries}: run scripts/realk8s/build.sh")
    if (run / "state.json").exists():
        down(run)
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    started = time.monotonic()
    certs = pki.make_all(run, node)
    launcher = Launcher(run, binaries)
    etcd = start_etcd(launcher)
    port = free_port()
    pki.write_kubeconfigs(run, certs, f"https://127.0.0.1:{port}", node)
    start_apiserver(launcher, certs, etcd, port)
    launcher.state["kubeconfig"] = str(run / "admin.kubeconfig")
    launcher.state["bin"] = str(binaries)
    if "controllers" in parts:
        start_controller_manager(launcher, certs)
    if "scheduler" in parts:
        start_kube_scheduler(launcher)
    launcher.save()
    if "kubelet" in parts:
        sock = start_containerd(launcher)
        start_kubelet(launcher, certs, node, sock)
    launcher.save()
    log(f"up in {time.monotonic() - started:.1f} s: KUBECONFIG={run / 'admin.kubeconfig'}")


def down(run: Path) -> None:
    state_file = run / "state.json"
    if not state_file.exists():
        return
    state = json.loads(state_file.read_text())
    pids: dict[str, int] = state.get("pids", {})
    order = ["kubelet", "kube-scheduler", "kube-controller-manager", "containerd"]
    for name in order:
        if name in pids:
            _stop(pids[name])
    _kill_shims(run)
    for name in ("kube-apiserver", "etcd"):
        if name in pids:
            _stop(pids[name])
    _unmount_under(run)
    _remove_netns()
    for name, value in state.get("sysctls", {}).items():
        try:
            Path(f"/proc/sys/{name}").write_text(value)
        except OSError as exc:
            log(f"could not restore {name}={value}: {exc}")
    subprocess.run(["ip", "link", "delete", "gtopo0"], capture_output=True)
    _clear_device_plugin_dir()
    state_file.unlink()
    log("down")


def restart(run: Path, name: str) -> None:
    """Stop one part (SIGTERM, as systemd does) and start it again with the same arguments."""
    state = json.loads((run / "state.json").read_text())
    launcher = Launcher(run, Path(state["bin"]))
    launcher.state = state
    _stop(state["pids"][name])
    launcher.start(name, state["argv"][name])
    log(f"restarted {name}")


def _stop(pid: int, grace: float = 10.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _kill_shims(run: Path) -> None:
    """The runc shims outlive containerd by design; ours name our socket in their arguments."""
    marker = str(run).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and marker in cmdline:
            try:
                os.killpg(int(proc.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                os.kill(int(proc.name), signal.SIGKILL)
    time.sleep(0.5)


def _unmount_under(run: Path) -> None:
    prefix = str(run.resolve())
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _remove_netns() -> None:
    netns = Path("/var/run/netns")
    if netns.exists():
        for entry in netns.iterdir():
            if entry.name.startswith("cni-"):
                subprocess.run(["ip", "netns", "delete", entry.name], capture_output=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="realk8s-cluster", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("up", "down", "status", "restart"))
    parser.add_argument("--part", default="kubelet", help="what `restart` restarts")
    parser.add_argument("--run-dir", type=Path, default=DEFAULT_RUN)
    parser.add_argument("--node", default="gputopo-node-0")
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        choices=PARTS,
        help="leave a part out (the control plane's etcd and kube-apiserver always run)",
    )
    args = parser.parse_args(argv)
    run = args.run_dir.resolve()
    if args.action == "up":
        try:
            up(run, args.node, set(PARTS) - set(args.without))
        except BaseException:
            down(run)
            raise
    elif args.action == "down":
        down(run)
    elif args.action == "restart":
        restart(run, args.part)
    else:
        print((run / "state.json").read_text() if (run / "state.json").exists() else "{}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
