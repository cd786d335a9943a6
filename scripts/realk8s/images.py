"""Container images made here, with no registry: Debian's static busybox in one layer.

Two images, each written as a docker-archive tarball (a layer tar, a config JSON, `manifest.json`)
that `ctr images import` reads: the sandbox (pause) image containerd starts every pod with, and a
test image whose `sh`, `env`, `sleep`, `cat` and friends the tier's pods run. Stdlib only.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"
TEST_IMAGE = "gputopo.test/busybox:1"
BUSYBOX = Path("/bin/busybox")
APPLETS = (
    "sh", "env", "printenv", "sleep", "cat", "ls", "echo", "true", "false", "id", "grep",
    "mkdir", "df", "mount", "stat", "wc", "head", "tail", "test", "ps", "kill",
)  # fmt: skip
# A pause that ends on SIGTERM (busybox as PID 1 would ignore it and wait for the KILL).
PAUSE_SCRIPT = 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done'


def _layer(busybox: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, "busybox", 0o777
            tar.addfile(info)
        for name, text in (
            ("etc/passwd", "root:x:0:0:root:/:/bin/sh\n"),
            ("etc/group", "root:x:0:\n"),
        ):
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(raw), 0o644
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def write_archive(target: Path, tag: str, entrypoint: list[str], cmd: list[str]) -> Path:
    """Write one image as a docker-archive tarball at `target`; returns it."""
    layer = _layer(BUSYBOX)
    layer_digest = hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created_by": "gputopo scripts/realk8s/images.py"}],
    }
    config_raw = json.dumps(config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_raw).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{layer_digest}/layer.tar"]}]
    files = {
        config_name: config_raw,
        f"{layer_digest}/layer.tar": layer,
        "manifest.json": json.dumps(manifest).encode(),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w") as tar:
        for name, raw in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(raw), 0o644
            tar.addfile(info, io.BytesIO(raw))
    return target


def write_all(folder: Path) -> dict[str, Path]:
    """Both images under `folder`, by tag."""
    return {
        PAUSE_IMAGE: write_archive(
            folder / "pause.tar", PAUSE_IMAGE, ["/bin/sh", "-c", PAUSE_SCRIPT], []
        ),
        TEST_IMAGE: write_archive(folder / "busybox.tar", TEST_IMAGE, [], ["/bin/sh"]),
    }
