"""`kubectl gputopo queues` and `queue pause|resume` against the fake API server (real client)."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest

from agent.cli import kubectl as kubectl_plugin
from tests.fakeapi import FakeApiServer

GROUP, VERSION = "scheduling.gputopo.io", "v1alpha1"
CRD_NAME = f"queues.{GROUP}"
NO_CRD = f"kubectl-gputopo: the Queue CRD ({CRD_NAME}) is not installed"


pytestmark = pytest.mark.usefixtures("restore_logging")


def queue_crd() -> dict:
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
        "subresources": {"status": {}},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "plural": "queues",
                "singular": "queue",
                "kind": "Queue",
                "listKind": "QueueList",
            },
            "scope": "Cluster",
            "versions": [version],
        },
    }


@pytest.fixture
def cluster(fake_api: FakeApiServer):
    """The fake with the Queue CRD (installed here unless the fake already serves it)."""
    if fake_api.get_object("customresourcedefinitions", CRD_NAME) is None:
        fake_api.register_crd(queue_crd())
    kubeconfig = fake_api.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig")
    return fake_api, str(kubeconfig)


def queue(name: str, parent: str | None = None, status: dict | None = None, **spec) -> dict:
    obj = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec | ({"parent": parent} if parent else {}),
    }
    return obj | ({"status": status} if status else {})


def gpus(n) -> dict:
    return {"nvidia.com/gpu": n}


def two_levels(fake: FakeApiServer) -> None:
    """org (a, b under it) and c at the top; the status as the scheduler writes it."""
    org_status = {
        "used": gpus("6"),
        "pending": {"units": 2, "resources": gpus("4")},
        "fairShare": gpus("10"),
        "conditions": [{"type": "Valid", "status": "True", "reason": "Valid", "message": ""}],
    }
    overcommitted = {"type": "Overcommitted", "status": "True", "reason": "Overcommitted"}
    for obj in (
        queue("org", min=gpus(8), max=gpus(12), weight=2, status=org_status),
        queue("a", "org", min=gpus("4"), max=gpus(10), status={"used": gpus("4")}),
        queue(
            "b",
            "org",
            min={"cpu": "500m"},
            max=gpus(10),
            status={"used": gpus(2), "borrowed": gpus("2"), "conditions": [overcommitted]},
        ),
        queue("c", paused=True, min=gpus("500m")),
    ):
        fake.put_object("queues", obj)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = kubectl_plugin.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_queues_prints_the_tree_with_gpu_columns_and_state(cluster) -> None:
    fake, kubeconfig = cluster
    two_levels(fake)
    code, out, err = run("--kubeconfig", kubeconfig, "queues")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split() for line in lines] == [
        ["QUEUE", "MIN", "MAX", "USED", "BORROWED", "PENDING", "FAIR", "SHARE", "STATE"],
        ["root", "-", "-", "-", "-", "-", "-", "ok"],
        ["c", "500m", "-", "-", "-", "-", "-", "paused"],
        ["org", "8", "12", "6", "-", "4", "10", "ok"],
        ["a", "4", "10", "4", "-", "-", "-", "ok"],
        ["b", "-", "10", "2", "2", "-", "-", "Overcommitted"],
    ]
    assert [len(line) - len(line.lstrip()) for line in lines[1:]] == [0, 2, 2, 4, 4]


def test_queues_flags_a_model_key_written_as_nvml_names_the_product(cluster) -> None:
    """The CRD without its rule (or a Queue from before it) lets such a key in; no scheduler has
    reported on the queue yet, and the plugin says what the scheduler will say."""
    fake, kubeconfig = cluster
    spaced = "nvidia.com/gpu@NVIDIA H100 80GB HBM3"
    fake.put_object("queues", queue("team", max={"nvidia.com/gpu": 8, spaced: 4}))
    fake.put_object("queues", queue("fine", max={"nvidia.com/gpu@NVIDIA-H100-80GB-HBM3": 4}))
    code, out, err = run("--kubeconfig", kubeconfig, "queues")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    rows = {line.split()[0]: line.split()[-1] for line in lines[2:6]}
    assert rows == {
        "fine": "yet",  # unknown: no status yet
        "@NVIDIA-H100-80GB-HBM3": "-",
        "team": "Invalid",
        "@NVIDIA": "key",
    }
    assert lines[6:] == [
        "",
        "Invalid keys (the scheduler refuses these queues):",
        f"  queue team: spec.max[{spaced}]: GPU model 'NVIDIA H100 80GB HBM3' is not a valid "
        "label value (the node's nvidia.com/gpu.product: `kubectl gputopo nodes` shows each "
        "model's key)",
    ]
    _, out, _ = run("--kubeconfig", kubeconfig, "queues", "-o", "json")
    team = next(q for q in json.loads(out) if q["name"] == "team")
    assert (team["state"], len(team["keyProblems"])) == ("Invalid", 1)


def test_queues_json_lists_the_same_data(cluster) -> None:
    fake, kubeconfig = cluster
    two_levels(fake)
    code, out, _ = run("queues", "-o", "json", "--kubeconfig", kubeconfig)
    doc = json.loads(out)
    assert code == 0
    assert [(q["name"], q["parent"], q["depth"], q["state"]) for q in doc] == [
        ("root", None, 0, "ok"),
        ("c", "root", 1, "paused"),
        ("org", "root", 1, "ok"),
        ("a", "org", 2, "ok"),
        ("b", "org", 2, "Overcommitted"),
    ]
    org = doc[2]
    assert org["pending"] == {"units": 2, "resources": gpus("4")}
    assert (org["min"], org["max"], org["weight"], org["fairShare"]) == (
        gpus(8),
        gpus(12),
        2,
        gpus("10"),
    )
    assert doc[4]["min"] == {"cpu": "500m"}


def test_pause_and_resume_patch_the_spec_and_read_back(cluster, custom_objects) -> None:
    fake, kubeconfig = cluster
    two_levels(fake)
    assert run("--kubeconfig", kubeconfig, "queue", "pause", "org") == (0, "queue org paused\n", "")
    paused = custom_objects.get_cluster_custom_object(GROUP, VERSION, "queues", "org")
    assert paused["spec"]["paused"] is True
    assert paused["status"]["used"] == gpus("6")  # the status is the scheduler's: untouched
    patches = fake.requests_matching("PATCH", r"/queues/")
    assert [(r.path.rsplit("/", 1)[1], r.content_type) for r in patches] == [
        ("org", "application/merge-patch+json")
    ]
    _, out, _ = run("--kubeconfig", kubeconfig, "queues")
    assert out.splitlines()[3].split()[-1] == "paused"
    code, out, _ = run("--kubeconfig", kubeconfig, "queue", "resume", "org")
    assert (code, out) == (0, "queue org resumed\n")
    resumed = custom_objects.get_cluster_custom_object(GROUP, VERSION, "queues", "org")
    assert resumed["spec"] == {"min": gpus(8), "max": gpus(12), "weight": 2, "paused": False}


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_a_missing_queue_is_one_line_and_exit_1(cluster, action: str) -> None:
    _, kubeconfig = cluster
    assert run("--kubeconfig", kubeconfig, "queue", action, "nope") == (
        1,
        "",
        "kubectl-gputopo: queue nope not found\n",
    )


def test_pausing_root_creates_it_and_the_tree_says_so(cluster, custom_objects) -> None:
    fake, kubeconfig = cluster
    assert run("--kubeconfig", kubeconfig, "queue", "resume", "root")[0] == 1
    assert run("--kubeconfig", kubeconfig, "queue", "pause", "root")[:2] == (
        0,
        "queue root paused\n",
    )
    root = custom_objects.get_cluster_custom_object(GROUP, VERSION, "queues", "root")
    assert root["spec"] == {"paused": True}
    _, out, _ = run("--kubeconfig", kubeconfig, "queues")
    assert out.splitlines()[0].startswith("scheduler paused")
    assert "no queues" in out.splitlines()[1]
    fake.put_object("queues", queue("team", max=gpus(4)))
    _, out, _ = run("--kubeconfig", kubeconfig, "queues")
    lines = out.splitlines()
    assert lines[0].startswith("scheduler paused")
    assert [lines[2].split()[0], lines[2].split()[-1], lines[3].split()[0]] == [
        "root",
        "paused",
        "team",
    ]
    assert run("--kubeconfig", kubeconfig, "queue", "resume", "root")[:2] == (
        0,
        "queue root resumed\n",
    )


def test_unknown_parents_and_cycles_are_listed_at_the_end(cluster) -> None:
    fake, kubeconfig = cluster
    for obj in (
        queue("ok", max=gpus(4), status={"conditions": [{"type": "Valid", "status": "True"}]}),
        queue("x", "y"),
        queue("y", "x"),
        queue("z", "x", status={"used": gpus(1)}),
        queue("self", "self"),
        queue("lost", "ghost"),
        queue("lost-child", "lost"),
    ):
        fake.put_object("queues", obj)
    code, out, err = run("--kubeconfig", kubeconfig, "queues")
    assert (code, err) == (0, "")
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["QUEUE", "MIN"],
        ["root", "-"],
        ["ok", "-"],
        [],
        ["parent", '"ghost"'],
        ["lost", "-"],
        ["lost-child", "-"],
        [],
        ["parent", "cycle"],
        ["self", "-"],
        [],
        ["parent", "cycle"],
        ["x", "-"],
        ["z", "-"],
        ["y", "-"],
    ]
    headings = [line for line in out.splitlines() if line.startswith("parent")]
    assert headings == [
        'parent "ghost" does not exist (not scheduled):',
        "parent cycle self -> self (not scheduled):",
        "parent cycle x -> y -> x (not scheduled):",
    ]
    assert "  lost-child" in out
    states = {line.split()[0]: line.split()[-1] for line in out.splitlines()[1:] if "  " in line}
    assert [states[q] for q in ("ok", "lost", "lost-child", "self", "x", "y", "z")] == [
        "ok",
        "UnknownParent",
        "UnknownParent",
        "Cycle",
        "Cycle",
        "Cycle",
        "UnknownParent",
    ]
    doc = json.loads(run("--kubeconfig", kubeconfig, "queues", "-o", "json")[1])
    assert {q["name"]: q["problem"] for q in doc}["z"] == "parent cycle x -> y -> x"


def test_no_queues_says_how_to_create_one(cluster) -> None:
    _, kubeconfig = cluster
    code, out, err = run("--kubeconfig", kubeconfig, "queues")
    assert (code, err) == (0, "")
    assert out.startswith("no queues:")
    assert "scheduling.gputopo.io/v1alpha1" in out
    assert out.count("\n") == 1


@pytest.mark.parametrize(
    "argv", [("queues",), ("queues", "-o", "json"), ("queue", "pause", "root")], ids=" ".join
)
def test_without_the_queue_crd_one_line_and_exit_1(argv) -> None:
    with FakeApiServer(install_crds=False) as fake:
        kubeconfig = fake.write_kubeconfig(Path(tempfile.mkdtemp(dir="/tmp")) / "kubeconfig")
        assert run("--kubeconfig", str(kubeconfig), *argv) == (1, "", NO_CRD + "\n")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("queue", "stop", "x"), "invalid choice: 'stop'"),
        (("queue", "pause"), "the following arguments are required: name"),
    ],
)
def test_queue_usage_errors_exit_2(capsys, argv, says: str) -> None:
    with pytest.raises(SystemExit) as exc:
        kubectl_plugin.main(list(argv))
    assert exc.value.code == 2
    assert says in capsys.readouterr().err
