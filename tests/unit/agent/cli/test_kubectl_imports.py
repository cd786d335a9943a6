"""`kubectl gputopo` runs on the base install (DESIGN §1): what it imports, at start and when it
talks to the API server, comes from the distribution's base dependencies, never from the agent's or
the scheduler's extras."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
EXTRAS_ONLY = (
    "grpc", "google.protobuf", "pynvml", "numpy", "prometheus_client", "waitress", "httptools",
    "msgspec", "psutil", "matplotlib", "deviceplugin", "scheduler",
)  # fmt: skip

# Block those modules, run the plugin through its commands' import paths (a missing kubeconfig
# is refused after the Kubernetes client is imported), print the third-party modules it loaded.
PROGRAM = f"""
import importlib.abc, json, sys
BLOCKED = {EXTRAS_ONLY!r}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"blocked: {{name}} is not in the base install", name=name)
        return None

sys.meta_path.insert(0, Block())
before = set(sys.modules)
from agent.cli import kubectl
code = kubectl.main(["--kubeconfig", "/nonexistent/kubeconfig", "nodes"])
loaded = sorted({{m.split(".")[0] for m in set(sys.modules) - before}})
print(json.dumps({{"code": code, "loaded": loaded}}))
"""


def _plugin_run() -> tuple[dict[str, object], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(name: str, source: Path) -> set[str]:
    """Absolute names `source` (module `name`) imports, relative imports resolved; type-only
    imports (under `if TYPE_CHECKING:`) are left out, as they never run."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    package = name if source.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def _static_closure(roots: list[str]) -> tuple[set[str], set[str]]:
    """(our modules reached from `roots`, the third-party top-level packages they import)."""
    ours, outside, todo = set(), set(), list(roots)
    while todo:
        name = todo.pop()
        if name in ours:
            continue
        source = _module_file(name)
        if source is None:
            top = name.split(".")[0]
            if (
                top not in {"agent", "deviceplugin", "scheduler"}
                and top not in sys.stdlib_module_names
            ):
                outside.add(top)
            continue
        ours.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run too
        todo += sorted(_imports(name, source))
    return ours, outside


def test_base_dependencies_are_the_plugins_own() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {re.split(r"[<>=!~ ]", d)[0].lower() for d in project["dependencies"]}
    assert base == {"kubernetes", "pyyaml", "xxhash"}
    assert project["license"] == "Apache-2.0"  # an SPDX string: setuptools deprecates the table
    extras = project["optional-dependencies"]
    assert {"grpcio", "nvidia-ml-py", "prometheus-client"} <= {
        re.split(r"[<>=!~ ]", d)[0].lower() for d in extras["agent"]
    }
    assert "numpy>=1.26" in extras["scheduler"]


def test_the_plugin_runs_with_every_extra_blocked() -> None:
    result, stderr = _plugin_run()
    assert result["code"] == 1
    assert "(kubeconfig /nonexistent/kubeconfig): no such file" in stderr
    assert "blocked" not in stderr


def test_our_import_closure_needs_only_the_base_dependencies() -> None:
    ours, outside = _static_closure(
        ["agent.cli.kubectl", "agent.kube.client", "agent.kube.connect"]
    )
    assert "agent.kube.connect" in ours
    assert not {m for m in ours if m.startswith(("deviceplugin", "scheduler", "agent.nvml"))}
    # urllib3 is the Kubernetes client's own transport (a dependency of `kubernetes`).
    assert outside == {"kubernetes", "urllib3", "yaml", "xxhash"}
