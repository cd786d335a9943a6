"""Two shares on one GPU, end to end, with no GPU and no cluster (README "Share a GPU").

The real agent process serves a simulated DGX A100 whose GPUs are shared (`sharing.timeSlicing`,
or `sharing.mps` with --mps) to the package's kubelet emulator, talking to the test suite's fake
API server. The scheduler's part of the share contract (DESIGN §12: take the node's share lock,
annotate the pod's GPU, bind) is played here through the real Kubernetes client. It prints what
each container's Allocate answered and what `kubectl gputopo nodes` and `topo` show. With --mps no
MPS daemon runs: the MPS root is a temporary directory whose status file says MPS serves.

    .venv/bin/python scripts/share_demo.py [--mps]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.cli import kubectl as kubectl_plugin
from agent.shares import GPU_COMPUTE
from tests.builders.scheduler import wait_for
from tests.builders.sharenode import GPU, NODE, ShareNode, share_container, share_node, share_pod

SHARED_GPU = 3
SHARES = (("train", "30Gi", "60"), ("notebook", "10Gi", None))


def place_two_shares(node: ShareNode, out: io.TextIOBase | None = None) -> list[dict[str, str]]:
    """Two pods on GPU 3, one after the other; each container's Allocate environment."""
    envs = []
    for name, memory, compute in SHARES:
        container = share_container("main", memory, **({GPU_COMPUTE: compute} if compute else {}))
        container["securityContext"] = {"runAsUser": 1000}
        pod = node.scheduler.place(share_pod(name, container), {"main": node.uuid(SHARED_GPU)})
        (admitted,) = node.admitter.admit(pod)
        if admitted.error is not None:
            raise SystemExit(f"{name}: {admitted.error}")
        node.scheduler.wait_released()
        envs.append(admitted.env("main", GPU))
        replica = admitted.devices["main"][GPU][0]
        if out is not None:
            out.write(f"pod {name}: replica {replica} -> {_env_text(envs[-1])}\n")
    return envs


def _env_text(env: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(env.items()))


def kubectl(node: ShareNode, *argv: str) -> str:
    kubeconfig = node.fake.write_kubeconfig(node.folder / "user-kubeconfig")
    out, err = io.StringIO(), io.StringIO()
    kubectl_plugin.main(["--kubeconfig", str(kubeconfig), *argv], out=out, err=err)
    return out.getvalue() + err.getvalue()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mps", action="store_true", help="sharing.mps instead of timeSlicing")
    args = parser.parse_args(argv)
    mode = "mps" if args.mps else "timeSlicing"
    with share_node(mode=mode) as node:
        print(f"agent: 8 GPUs, sharing.{mode} with 4 replicas each; starting...")
        node.start_agent()
        place_two_shares(node, sys.stdout)
        wait_for(lambda: "3:2/4" in kubectl(node, "nodes"), 15, "the NRT to show both shares")
        print("\n$ kubectl gputopo nodes")
        print(kubectl(node, "nodes"))
        print(f"$ kubectl gputopo topo {NODE}   (the end: GPUs and shares)")
        topo = kubectl(node, "topo", NODE)
        print(topo[topo.index("GPU   PRODUCT") :])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
