"""`scheduler.sim.trace`: the Alibaba GPU trace CSVs, every column, errors with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim.trace import (
    PodClass,
    TraceError,
    TraceNode,
    parse_node_list,
    parse_pod_list,
    read_node_list,
    read_pod_list,
    sniff_kind,
)

NODES = """sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,64000,262144,2,P100
openb-node-0001,96000,393216,8,G2
openb-node-0002,32000,131072,0,
"""

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,"
    "gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)
PODS = (
    POD_HEADER
    + """openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
openb-pod-0001,6000,12288,1,460,G2|T4,BE,Pending,427061,12902960,
openb-pod-0002,88000,327680,8,1000,,Burstable,Succeeded,10,20,11
openb-pod-0003,4000,8192,0,0,,Guaranteed,Failed,30,,
"""
)

MULTIGPU = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
openb-pod-0000,12000,16384,2,1000
"""


def test_node_list_keeps_every_column():
    nodes = parse_node_list(NODES, "nodes.csv")
    assert nodes[0] == TraceNode(
        name="openb-node-0000", cpu_milli=64000, memory_mib=262144, gpus=2, model="P100"
    )
    assert (nodes[2].gpus, nodes[2].model) == (0, "")


def test_pod_list_keeps_every_column():
    pods = parse_pod_list(PODS, "pods.csv")
    share = pods[1]
    assert (share.num_gpu, share.gpu_milli, share.gpu_spec) == (1, 460, ("G2", "T4"))
    assert (share.qos, share.pod_phase, share.creation_time) == ("BE", "Pending", 427061)
    assert (share.deletion_time, share.scheduled_time) == (12902960, None)
    assert [p.pod_class for p in pods] == [
        PodClass.ONE,
        PodClass.SHARE,
        PodClass.EIGHT,
        PodClass.CPU,
    ]
    assert pods[2].gpu_milli_total == 8000


def test_five_column_multigpu_form():
    (pod,) = parse_pod_list(MULTIGPU, "multigpu.csv")
    assert (pod.num_gpu, pod.gpu_spec, pod.qos, pod.creation_time) == (2, (), "", None)
    assert pod.pod_class is PodClass.TWO


@pytest.mark.parametrize(
    ("row", "message"),
    [
        pytest.param(
            "p,12x,1,1,1000", r"pods.csv:2: column 'cpu_milli': expected an integer", id="int"
        ),
        pytest.param(
            "p,1,1,1,0", r"pods.csv:2: column 'gpu_milli': 0 does not agree", id="no milli"
        ),
        pytest.param(
            "p,1,1,2,500", r"pods.csv:2: column 'gpu_milli': a share \(500\)", id="shares"
        ),
        pytest.param(
            "p,1,1,9,1000", r"pods.csv:2: column 'num_gpu': 9 is out of range", id="range"
        ),
        pytest.param("p,1,1,1", r"pods.csv:2: 4 cells, header has 5", id="short row"),
        pytest.param(",1,1,1,1000", r"pods.csv:2: column 'name': empty pod name", id="no name"),
    ],
)
def test_bad_pod_rows_name_file_line_and_column(row: str, message: str):
    with pytest.raises(TraceError, match=message):
        parse_pod_list(MULTIGPU.splitlines()[0] + "\n" + row + "\n", "pods.csv")


def test_bad_qos_and_duplicates_are_rejected():
    bad_qos = PODS.replace(",LS,", ",Gold,", 1)
    with pytest.raises(TraceError, match=r"pods.csv:2: column 'qos': 'Gold' is not one of"):
        parse_pod_list(bad_qos, "pods.csv")
    with pytest.raises(TraceError, match=r"nodes.csv: duplicate name 'openb-node-0000'"):
        parse_node_list(NODES + "openb-node-0000,1,1,0,\n", "nodes.csv")


def test_headers_are_checked():
    with pytest.raises(TraceError, match=r"x.csv:1: header lacks column\(s\) gpu_milli"):
        parse_pod_list("name,cpu_milli,memory_mib,num_gpu\n", "x.csv")
    with pytest.raises(TraceError, match=r"x.csv:1: unknown column\(s\) colour"):
        parse_node_list("sn,cpu_milli,memory_mib,gpu,model,colour\n", "x.csv")
    with pytest.raises(TraceError, match=r"x.csv:3: column 'model': empty GPU model"):
        parse_node_list("sn,cpu_milli,memory_mib,gpu,model\na,1,1,0,\nb,1,1,2,\n", "x.csv")


def test_files_are_read_and_sniffed(tmp_path: Path):
    nodes, pods = tmp_path / "n.csv", tmp_path / "p.csv"
    nodes.write_text(NODES, encoding="utf-8")
    pods.write_text(PODS, encoding="utf-8")
    assert len(read_node_list(nodes)) == 3
    assert len(read_pod_list(pods)) == 4
    assert (sniff_kind(nodes), sniff_kind(pods)) == ("nodes", "pods")
    with pytest.raises(TraceError, match=r"missing.csv: cannot read"):
        read_pod_list(tmp_path / "missing.csv")
