"""`kubectl gputopo topo NODE` names the DRA claims that hold the node's GPUs."""

from __future__ import annotations

import io
import json
import logging
import tempfile
from pathlib import Path

import pytest

from agent.availability import compute_availability
from agent.cli import kubectl as kubectl_plugin
from agent.nrt import encode
from agent.numa_capacity import KubeletConfig, numa_capacity
from agent.nvml.fixture import load_fixture
from tests.builders.dra import allocation_status, make_claim
from tests.fakeapi import FakeApiServer

NODE = "dgx-a100-mig"


@pytest.fixture(autouse=True)
def _restore_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def _claim(fake: FakeApiServer, name: str, devices, namespace="default", node=NODE, **kw):
    obj = make_claim(name)
    obj["metadata"]["namespace"] = namespace
    obj.update(allocation_status(node, devices, [("p", "uid-p")], **kw))
    fake.put_object("resourceclaims", obj)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = kubectl_plugin.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def kubeconfig(fake_api):
    inv = load_fixture(NODE).inventory
    av = compute_availability(inv, numa_capacity(inv.numa_nodes, KubeletConfig()), None)
    fake_api.put_object("noderesourcetopologies", encode(inv, av, node_name=NODE))
    fake_api.put_object("namespaces", {"metadata": {"name": "ml"}})
    _claim(fake_api, "train", [("gpu", "gpu-4"), ("gpu", "gpu-6")], namespace="ml")
    _claim(fake_api, "small", [("mig", "gpu-1-mig-2g-20gb-4")])
    _claim(fake_api, "elsewhere", [("gpu", "gpu-4")], node="other-node")
    _claim(fake_api, "nic", [("nic", "eth0")], driver="nic.example.com")
    return str(fake_api.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig"))


def test_topo_table_names_the_claim_holding_each_gpu(kubeconfig):
    code, out, err = run("--kubeconfig", kubeconfig, "topo", NODE)
    assert (code, err) == (0, "")
    table = out[out.index("DRA DEVICE") - len("GPU  ") :].splitlines()
    rows = [line.split() for line in table[1:]]
    assert rows == [
        ["1", "gpu-1-mig-2g-20gb-4", "default/small", "-"],
        ["4", "gpu-4", "ml/train", "-"],
        ["6", "gpu-6", "ml/train", "-"],
    ]


def test_topo_json_lists_dra_claims(kubeconfig):
    code, out, _ = run("--kubeconfig", kubeconfig, "-o", "json", "topo", NODE)
    doc = json.loads(out)
    assert code == 0
    assert [(c["gpu"], c["claim"]) for c in doc["draClaims"]] == [
        (1, "default/small"),
        (4, "ml/train"),
        (6, "ml/train"),
    ]
