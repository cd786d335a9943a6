"""`kubectl gputopo` against the fake API server: matrices of every fixture, bad objects, errors."""

from __future__ import annotations

import io
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from agent.availability import compute_availability
from agent.cli import kubectl as kubectl_plugin
from agent.cli.kubectl_nodes import QUOTA_KEY_NOTE
from agent.labels import PRODUCT, gfd_labels
from agent.nrt import encode
from agent.numa_capacity import KubeletConfig, numa_capacity
from agent.nvml.fixture import builtin_names, load_fixture
from agent.resource_names import model_key_problem
from agent.topo_table import render_legend, render_topo_matrix
from scheduler.quota.models import model_of_product
from tests.builders.dra import allocation_status, make_claim
from tests.builders.nrt import as_published
from tests.builders.topology import allocatable_of, gpu_pod
from tests.fakeapi import FakeApiServer

PREFIX = "kubectl-gputopo: NodeResourceTopology"
NOT_OURS = "not written by gputopo (expected 'v1')"
GOLDEN = Path(__file__).resolve().parents[3] / "golden"


pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture(scope="module")
def cluster():
    """A node per built-in fixture (its GPU 0 held by a pod), a foreign and a broken object."""
    with FakeApiServer() as fake:
        for name in builtin_names():
            inv = load_fixture(name).inventory
            snapshot = replace(allocatable_of(inv), pods=(gpu_pod("ml", "p", *_first_device(inv)),))
            av = compute_availability(inv, numa_capacity(inv.numa_nodes, KubeletConfig()), snapshot)
            fake.put_object(
                "noderesourcetopologies", encode(inv, av, node_name=name, policy="single-numa-node")
            )
        fake.put_object("noderesourcetopologies", _foreign("cpu-only-1"))
        h100 = load_fixture("dgx-h100").inventory
        av = compute_availability(h100, numa_capacity(h100.numa_nodes, KubeletConfig()), None)
        broken = encode(h100, av, node_name="broken-1")
        broken["zones"][-1]["costs"] = broken["zones"][-1]["costs"][:-1]
        fake.put_object("noderesourcetopologies", broken)
        kubeconfig = fake.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig")
        yield fake, str(kubeconfig)


def _first_device(inv) -> tuple[str, ...]:
    gpu = inv.gpus[0]
    return (str(gpu.mig_devices[0].uuid),) if gpu.mig_devices else (str(gpu.uuid),)


def _foreign(name: str) -> dict:
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "zones": [
            {
                "name": "node-0",
                "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": "8", "allocatable": "8", "available": "8"}
                ],
            }
        ],
        "attributes": [{"name": "topologyManagerPolicy", "value": "none"}],
    }


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = kubectl_plugin.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", builtin_names())
def test_topo_renders_the_fixture_matrix_exactly(cluster, name: str) -> None:
    _, kubeconfig = cluster
    code, out, err = run("--kubeconfig", kubeconfig, "topo", name)
    assert (code, err) == (0, "")
    matrix = render_topo_matrix(as_published(load_fixture(name).inventory))
    assert matrix + "\n" + render_legend() in out
    golden = GOLDEN / f"{name}.topo"
    if golden.exists():
        lines = golden.read_text(encoding="utf-8").splitlines()
        assert "".join(line + "\n" for line in lines if not line.startswith("#")) == matrix


def test_topo_shows_numa_gpus_and_mig_layout(cluster) -> None:
    _, kubeconfig = cluster
    code, out, _ = run("topo", "dgx-a100-mig", "--kubeconfig", kubeconfig)
    inv = load_fixture("dgx-a100-mig").inventory
    assert code == 0
    assert "topology manager single-numa-node/container" in out
    assert "MIG LAYOUT" in out
    for gpu in inv.gpus:
        if gpu.mig_devices:
            assert gpu.mig_layout in out
    assert "CPU FREE/ALLOC" in out


def test_topo_json(cluster) -> None:
    _, kubeconfig = cluster
    code, out, _ = run("--kubeconfig", kubeconfig, "-o", "json", "topo", "dgx-h100")
    doc = json.loads(out)
    assert code == 0
    assert doc["matrix"][0][:3] == ["X", "NV18", "NV18"]
    assert doc["gpus"][0]["resources"]["nvidia.com/gpu"] == {"allocatable": 1, "available": 0}
    assert len(doc["gpus"]) == 8
    assert (doc["wholeGpus"], doc["wholeGpusFree"], doc["migGpus"]) == (8, 7, 0)


def test_nodes_table_reports_bad_objects_one_line_each(cluster) -> None:
    _, kubeconfig = cluster
    code, out, err = run("--kubeconfig", kubeconfig, "nodes")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "NODE", "PRODUCT", "GPUS", "WHOLE", "WHOLE", "FREE", "MIG", "GPUS", "MIG", "FREE",
        "NVLINK", "ISLANDS", "HEALTH",
    ]  # fmt: skip
    table = lines[: lines.index("")] if "" in lines else lines
    assert len(table) == 1 + len(builtin_names())
    h100 = next(line for line in lines if line.startswith("dgx-h100 "))
    assert h100.split()[-7:] == ["8", "8", "7", "-", "-", "0-7", "Healthy"]
    assert err.splitlines() == [
        f"{PREFIX} broken-1: zones[9] (gpu-7).costs: no cost to gpu-6",
        f"{PREFIX} cpu-only-1: attributes.gputopo.io/schema: {NOT_OURS}",
    ]


def test_nodes_shows_the_quota_key_of_each_gpu_model_as_the_scheduler_reads_it(cluster) -> None:
    """NVML's product has spaces; a Queue's key names the node's product label."""
    _, kubeconfig = cluster
    code, out, _ = run("--kubeconfig", kubeconfig, "nodes")
    assert code == 0
    note = out.splitlines().index(QUOTA_KEY_NOTE)
    pairs = [line.rsplit("   ", 1) for line in out.splitlines()[note + 1 :]]
    keys = {product.strip(): key for product, key in pairs}
    assert keys["NVIDIA H100 80GB HBM3"] == "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
    assert keys["Tesla T4"] == "nvidia.com/gpu@Tesla-T4"
    for name in ("dgx-h100", "single-t4"):
        inv = load_fixture(name).inventory
        model = model_of_product(gfd_labels(inv)[PRODUCT])  # what the scheduler charges
        key = keys[inv.gpus[0].product]
        assert (key, model_key_problem(key)) == (f"nvidia.com/gpu@{model}", None)
    _, out, _ = run("--kubeconfig", kubeconfig, "nodes", "-o", "json")
    h100 = next(n for n in json.loads(out)["nodes"] if n["node"] == "dgx-h100")
    assert h100["quotaKeys"] == {"NVIDIA H100 80GB HBM3": "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"}


def test_nodes_json_lists_mig_free_by_profile(cluster) -> None:
    _, kubeconfig = cluster
    code, out, _ = run("nodes", "-o", "json", "--kubeconfig", kubeconfig)
    doc = json.loads(out)
    mig = next(n for n in doc["nodes"] if n["node"] == "dgx-a100-mig")
    assert code == 0
    assert sum(mig["migFree"].values()) > 0
    assert {e["node"] for e in doc["errors"]} == {"broken-1", "cpu-only-1"}


def test_missing_node_and_broken_node(cluster) -> None:
    _, kubeconfig = cluster
    assert run("--kubeconfig", kubeconfig, "topo", "nope") == (
        1,
        "",
        "kubectl-gputopo: no NodeResourceTopology for node nope\n",
    )
    code, out, err = run("--kubeconfig", kubeconfig, "topo", "broken-1")
    assert (code, out) == (1, "")
    assert err == f"{PREFIX} broken-1: zones[9] (gpu-7).costs: no cost to gpu-6\n"


def test_unreachable_api_server_is_one_line() -> None:
    with FakeApiServer() as fake:
        kubeconfig = fake.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig")
        server = fake.host
        fake.down()
        code, out, err = run("--kubeconfig", str(kubeconfig), "nodes")
    assert (code, out) == (1, "")
    unreachable = (
        f"listing NodeResourceTopologies: API server {server} unreachable: Connection refused"
    )
    assert err == f"kubectl-gputopo: {unreachable}\n"


def test_usage_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        kubectl_plugin.main(["topo"])
    assert exc.value.code == 2
    assert "the following arguments are required: node" in capsys.readouterr().err


def test_nodes_on_a_mig_node_counts_whole_gpus_and_slices_apart(cluster) -> None:
    """dgx-a100-mig: GPUs 0-3 in MIG mode with 14 slices, GPUs 4-7 whole; all free (the pod
    the fixture cluster puts there names a MIG device as nvidia.com/gpu, which holds nothing)."""
    _, kubeconfig = cluster
    code, out, _ = run("--kubeconfig", kubeconfig, "nodes")
    row = next(line for line in out.splitlines() if line.startswith("dgx-a100-mig "))
    inv = load_fixture("dgx-a100-mig").inventory
    slices = sum(len(g.mig_devices) for g in inv.gpus)
    assert code == 0
    assert row.split()[-7:-3] == ["8", "4", "4", "4"]  # GPUS, WHOLE, WHOLE FREE, MIG GPUS
    assert sum(int(p.split(":")[1]) for p in row.split()[-3].split(",")) == slices == 14
    assert "WHOLE: GPUs requested as nvidia.com/gpu" in out


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_nodes_and_topo_as_json_and_yaml(cluster, output) -> None:
    _, kubeconfig = cluster
    parse = json.loads if output == "json" else yaml.safe_load
    code, out, _ = run("--kubeconfig", kubeconfig, "nodes", "-o", output)
    t4 = next(n for n in parse(out)["nodes"] if n["node"] == "single-t4")
    assert code == 0
    assert (t4["gpus"], t4["wholeGpus"], t4["wholeGpusFree"], t4["migGpus"]) == (1, 1, 0, 0)
    code, out, _ = run("--kubeconfig", kubeconfig, "-o", output, "topo", "dgx-a100-mig")
    doc = parse(out)
    assert code == 0
    assert (doc["wholeGpus"], doc["migGpus"]) == (4, 4)
    assert [g["index"] for g in doc["gpus"]] == list(range(8))


def test_one_gpu_is_singular(cluster) -> None:
    _, kubeconfig = cluster
    code, out, _ = run("--kubeconfig", kubeconfig, "topo", "single-t4")
    assert code == 0
    assert out.startswith("Node single-t4: 1 GPU, driver ")


def test_context_picks_the_cluster(cluster, tmp_path) -> None:
    _, kubeconfig = cluster
    config = yaml.safe_load(Path(kubeconfig).read_text(encoding="utf-8"))
    config["clusters"].append({"name": "gone", "cluster": {"server": "http://127.0.0.1:1"}})
    config["contexts"].append({"name": "other", "context": {"cluster": "gone", "user": "fake"}})
    config["current-context"] = "other"
    two = tmp_path / "kubeconfig"
    two.write_text(yaml.safe_dump(config), encoding="utf-8")
    code, out, err = run("--kubeconfig", str(two), "--context", "fake", "topo", "single-t4")
    assert (code, err) == (0, "")
    assert out.startswith("Node single-t4: ")
    code, _, err = run("--kubeconfig", str(two), "topo", "single-t4")
    assert code == 1
    assert "API server http://127.0.0.1:1 unreachable" in err


def test_no_arguments_lists_the_commands() -> None:
    code, out, err = run()
    assert (code, err) == (2, "")
    assert out.startswith("usage: kubectl gputopo ")
    for command in ("nodes", "topo", "queues", "queue"):
        assert f"\n    {command} " in out


# DRA: the claims that hold a node's GPUs

DRA_NODE = "dgx-a100-mig"


def _claim(fake: FakeApiServer, name: str, devices, namespace="default", node=DRA_NODE, **kw):
    obj = make_claim(name)
    obj["metadata"]["namespace"] = namespace
    obj.update(allocation_status(node, devices, [("p", "uid-p")], **kw))
    fake.put_object("resourceclaims", obj)


@pytest.fixture
def dra_kubeconfig(fake_api):
    inv = load_fixture(DRA_NODE).inventory
    av = compute_availability(inv, numa_capacity(inv.numa_nodes, KubeletConfig()), None)
    fake_api.put_object("noderesourcetopologies", encode(inv, av, node_name=DRA_NODE))
    fake_api.put_object("namespaces", {"metadata": {"name": "ml"}})
    _claim(fake_api, "train", [("gpu", "gpu-4"), ("gpu", "gpu-6")], namespace="ml")
    _claim(fake_api, "small", [("mig", "gpu-1-mig-2g-20gb-4")])
    _claim(fake_api, "elsewhere", [("gpu", "gpu-4")], node="other-node")
    _claim(fake_api, "nic", [("nic", "eth0")], driver="nic.example.com")
    return str(fake_api.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig"))


def test_topo_table_names_the_claim_holding_each_gpu(dra_kubeconfig):
    code, out, err = run("--kubeconfig", dra_kubeconfig, "topo", DRA_NODE)
    assert (code, err) == (0, "")
    table = out[out.index("DRA DEVICE") - len("GPU  ") :].splitlines()
    rows = [line.split() for line in table[1:]]
    assert rows == [
        ["1", "gpu-1-mig-2g-20gb-4", "default/small", "-"],
        ["4", "gpu-4", "ml/train", "-"],
        ["6", "gpu-6", "ml/train", "-"],
    ]


def test_topo_json_lists_dra_claims(dra_kubeconfig):
    code, out, _ = run("--kubeconfig", dra_kubeconfig, "-o", "json", "topo", DRA_NODE)
    doc = json.loads(out)
    assert code == 0
    assert [(c["gpu"], c["claim"]) for c in doc["draClaims"]] == [
        (1, "default/small"),
        (4, "ml/train"),
        (6, "ml/train"),
    ]
