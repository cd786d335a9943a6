"""Share Allocate latency with 100 pods on the node (issue 26), not a test.

The real agent process serves 8 time-sliced GPUs x 16 replicas to the kubelet emulator; the
scheduler's part (lock, `gputopo.io/gpus`, bind) is played through the real client against the
fake API server. 100 share pods are placed and admitted one after another, so the later ones'
Allocate sees up to 99 other pods in the PodResources `List` and on the node. Prints the Allocate
latency as the kubelet waited for it (gRPC round trip included), p50/p99/max, and the API
requests the agent made per pod.

    .venv/bin/python bench/share_allocate_bench.py [--pods N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.builders.sharenode import share_node, share_pod

TARGET_P99_MS = 50.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100)
    args = parser.parse_args(argv)
    seconds: list[float] = []
    with share_node(replicas=16) as node:
        node.start_agent()
        for i in range(args.pods):
            pod = node.scheduler.place(share_pod(f"bench-{i}"), {"main": node.uuid(i % 8)})
            (done,) = node.admitter.admit(pod)
            assert done.error is None, done.error
            seconds += done.allocate_seconds
            node.scheduler.wait_released()
        agent_requests = [c for c in node.fake.authorization_checks if c.user == "fake-token"]
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[max(0, round(0.99 * len(ms)) - 1)]
    print(f"share Allocate, {args.pods} pods on the node, {len(ms)} calls")
    print(f"  p50 {statistics.median(ms):.1f} ms  p99 {p99:.1f} ms  max {ms[-1]:.1f} ms")
    print(f"  target p99 < {TARGET_P99_MS:.0f} ms: {'met' if p99 < TARGET_P99_MS else 'MISSED'}")
    if agent_requests:
        print(f"  agent API requests per pod: {len(agent_requests) / args.pods:.1f}")
    return 0 if p99 < TARGET_P99_MS else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
