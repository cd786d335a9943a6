"""`gputopo-agent run` for a Node that does not exist (a mistyped `--node-name`): no object is
left behind; `--oneshot` fails in one line, the running agent waits, says why, and publishes once
the Node appears, and says so with the object's resourceVersion. The installed command as a
process, against the fake API server."""

from __future__ import annotations

from tests.builders.agentnode import NODE_CAPACITY
from tests.builders.commands import AgentProcess, empty_dir, readyz, run_command, wait_for
from tests.fakeapi import FakeApiServer

PLURAL = "noderesourcetopologies"
NOT_FOUND = "Node {} not found: nothing is published for it until it exists (is --node-name right?)"


def oneshot(fake: FakeApiServer, node: str):
    kubeconfig = fake.write_kubeconfig(empty_dir() / "kubeconfig")
    return run_command(
        "gputopo-agent", "run", "--oneshot", "--nvml-fixture", "single-t4", "--node-name", node,
        "--kubeconfig", str(kubeconfig), "--kubelet-config", "/nonexistent/config.yaml",
        "--pod-resources-socket", str(empty_dir() / "kubelet.sock"),
    )  # fmt: skip


def test_oneshot_for_a_missing_node_fails_in_one_line_and_writes_nothing(
    fake_api_with_crd: FakeApiServer,
) -> None:
    done = oneshot(fake_api_with_crd, "no-such-node")
    line = f"gputopo-agent run: {NOT_FOUND.format('no-such-node')}"
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == line
    assert done.stderr.count("not found") == 1  # not retried: it would not appear meanwhile
    assert "Traceback" not in done.stderr
    assert fake_api_with_crd.get_object(PLURAL, "no-such-node") is None


def test_the_running_agent_waits_for_the_node_then_publishes(
    fake_api_with_crd: FakeApiServer,
) -> None:
    fake, late = fake_api_with_crd, "gpu-node-late"
    kubeconfig = fake.write_kubeconfig(empty_dir() / "kubeconfig")
    agent = AgentProcess(
        "--nvml-fixture", "single-t4", "--no-device-plugin", "--kubeconfig", str(kubeconfig),
        "--pod-resources-socket", str(empty_dir() / "kubelet.sock"),
        "--metrics-address", "127.0.0.1:0", "--kubelet-config", "/nonexistent/config.yaml",
        home=empty_dir(), node=late,
    )  # fmt: skip
    try:
        port = agent.port()
        assert wait_for(lambda: agent.logged(NOT_FOUND.format(late)), 10.0), agent.lines
        waiting = readyz(port)
        assert fake.get_object(PLURAL, late) is None
        fake.add_node(late, capacity=NODE_CAPACITY)
        published = wait_for(lambda: agent.logged(f"published NodeResourceTopology {late}"), 15)
        ready = wait_for(lambda: readyz(port)[0] == 200, 10.0)
    finally:
        code = agent.stop()
    assert code == 0, "\n".join(agent.lines)
    assert waiting == (
        503, f"not ready: NodeResourceTopology not published yet: {NOT_FOUND.format(late)}\n"
    )  # fmt: skip
    warnings = [x for x in agent.logged(NOT_FOUND.format(late)) if " WARNING " in x]
    assert len(warnings) == 1, agent.lines  # looked up again every 5 s, said once
    assert published, agent.lines
    assert ready
    stored, node = fake.get_object(PLURAL, late), fake.get_object("nodes", late)
    assert stored is not None
    assert node is not None
    assert stored["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    (line,) = agent.logged("published NodeResourceTopology")
    version = stored["metadata"]["resourceVersion"]
    assert line.endswith(f" INFO agent.kube.publisher: published NodeResourceTopology {late} "
                         f"(resourceVersion {version})")  # fmt: skip
