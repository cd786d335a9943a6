"""The README's main job: the demo runs end to end on the embedded default and tells the story."""

from __future__ import annotations

import io

from scheduler.cli import demo, demo_cluster


def test_cluster_demo_shows_both_failures_and_the_fix() -> None:
    out = io.StringIO()
    demo_cluster.run(out)
    text = out.getvalue()
    assert (
        "stock kube-scheduler after eight 1-GPU pods: node-a 4/8 GPUs used, node-b 4/8 GPUs used"
        in text
    )
    assert "the 8-GPU pod: Pending: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in text
    assert "the 8-GPU pod: bound on node-" in text
    assert "3 training pods Pending while 5 hold GPUs: deadlock" in text
    assert "the gang waits holding 0 GPUs" in text
    assert "the whole gang binds at once" in text
    summary = text.split("LeastAllocated) ==\n")[1].split("\n\n")[0].splitlines()
    rows = {line.split()[0]: line.split() for line in summary[1:]}
    assert float(rows["gputopo"][2]) > float(rows["spread"][2])  # higher mean GPU allocation


def test_rack_gang_stays_in_one_rack_on_nvlink_pairs() -> None:
    lines = demo_cluster.rack_gang(io.StringIO())
    assert len(lines) == 4
    nodes = {line.split(" -> ")[1].split()[0] for line in lines}
    assert nodes <= {"dgx-0", "dgx-1"} or nodes <= {"dgx-2", "dgx-3"}


def test_node_demo_advertises_publishes_and_recovers_from_an_xid() -> None:
    out = io.StringIO()
    demo.node_demo(out, quiet_s=1.0)
    text = out.getvalue()
    assert "nvidia.com/mig-1g.10gb     8 devices" in text
    assert "nvidia.com/gpu             4 devices" in text
    assert "preferred allocation GPUs [4, 5]" in text
    assert "gputopo.io/allocationSource: podresources" in text
    assert "zone gpu-4 (GPU under node-7, Healthy, whole GPU): gpu=0/1/1" in text
    assert f"GPU {demo.XID_GPU} Unhealthy: ListAndWatch resent" in text
    assert f"GPU {demo.XID_GPU} Healthy again (4 GPUs allocatable)" in text
