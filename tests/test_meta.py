"""Rules about the test suite itself, read from its source with `ast`:

- every test function asserts something that is not a constant;
- no module under tests/ imports a test module (`test_*.py`) or a `conftest`: what tests share
  lives in tests/builders/ (or tests/fakeapi/, the one Kubernetes fake);
- a test module sits where it mirrors the package it tests: tests/unit/<pkg>/... or
  tests/integration/<pkg>/..., each folder below <pkg> an existing subpackage of it; a tier that
  tests the whole product against real parts (tests/realk8s/, tests/gpu/) is a folder of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent
RAISES_NAMES = {"raises", "warns", "fail"}

MIRRORED = {
    "unit": {
        "agent": ROOT / "agent",
        "deviceplugin": ROOT / "deviceplugin",
        "scheduler": ROOT / "scheduler",
        "daemonset": ROOT / "daemonset",
        "scripts": ROOT / "scripts",
        "fakeapi": TESTS / "fakeapi",
    },
    "integration": {
        "agent": ROOT / "agent",
        "deviceplugin": ROOT / "deviceplugin",
        "scheduler": ROOT / "scheduler",
    },
}
"""tests/<kind>/<name>/... mirrors the folder MIRRORED[kind][name]."""
SUITE_WIDE = {TESTS / "test_meta.py", TESTS / "test_docs.py"}
"""Test modules about the suite, or the repository's docs, as a whole: allowed at the top of
tests/."""
TIERS = {TESTS / "realk8s", TESTS / "gpu"}
"""Folders of tiers that test the product as a whole against real parts (not one package)."""


def _is_assertive(node: ast.AST) -> bool:
    """An assert on a non-constant, a pytest.raises/warns block, or a call to an `assert_*` or
    `check_*` helper."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assert) and not isinstance(sub.test, ast.Constant):
            return True
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in RAISES_NAMES or name.startswith(("assert_", "check_", "expect_")):
                return True
    return False


def _test_functions() -> list[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                "test"
            ):
                found.append((path, node))
    return found


def test_every_test_asserts_something() -> None:
    weak = [
        f"{path.relative_to(TESTS)}:{fn.lineno} {fn.name}"
        for path, fn in _test_functions()
        if not _is_assertive(fn)
    ]
    assert weak == [], "tests with no assertion or only constant ones:\n" + "\n".join(weak)


def test_meta_detects_weak_tests() -> None:
    weak = ast.parse("def test_x():\n    assert True\n").body[0]
    strong = ast.parse("def test_y():\n    assert 1 + x == 2\n").body[0]
    assert not _is_assertive(weak)
    assert _is_assertive(strong)


def _imported_names(module: str, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything `tree` (the module `module`) may import as a module:
    `import a.b`, `from a import b` (both `a` and `a.b`), relative imports resolved, and
    `importlib.import_module("a.b")` with a constant argument."""
    package = module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = ".".join(part for part in (base, node.module or "") if part)
            yield node.lineno, source
            yield from ((node.lineno, f"{source}.{alias.name}") for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def _is_test_or_conftest(dotted: str) -> bool:
    """True when `dotted` names a `test_*.py` or `conftest.py` file of this repository."""
    file = ROOT.joinpath(*dotted.split(".")).with_suffix(".py")
    return (file.name.startswith("test_") or file.name == "conftest.py") and file.is_file()


def _test_module_imports(path: Path, source: str) -> list[str]:
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    tree = ast.parse(source, filename=str(path))
    return [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for line, name in _imported_names(module, tree)
        if _is_test_or_conftest(name)
    ]


def _misplaced(path: Path) -> str | None:
    """Why the test module at `path` does not mirror a package (None when it does)."""
    if path in SUITE_WIDE or path.parent in TIERS:
        return None
    parts = path.relative_to(TESTS).parts  # (kind, name, *subpackages, file)
    roots = MIRRORED.get(parts[0], {})
    if len(parts) < 3 or parts[1] not in roots:
        allowed = ", ".join(f"tests/{kind}/<{'|'.join(names)}>" for kind, names in MIRRORED.items())
        return f"not under {allowed}"
    package = roots[parts[1]]
    mirrored = package.joinpath(*parts[2:-1])
    is_python = (package / "__init__.py").is_file()
    if not mirrored.is_dir() or (is_python and not (mirrored / "__init__.py").is_file()):
        return f"{mirrored.relative_to(ROOT)}/ is not a subpackage of {package.relative_to(ROOT)}"
    return None


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    bad = [
        problem
        for path in sorted(TESTS.rglob("*.py"))
        for problem in _test_module_imports(path, path.read_text(encoding="utf-8"))
    ]
    assert bad == [], "shared helpers belong in tests/builders/:\n" + "\n".join(bad)


def test_every_test_module_mirrors_a_package() -> None:
    misplaced = [
        f"{path.relative_to(ROOT)}: {why}"
        for path in sorted(TESTS.rglob("test_*.py"))
        if (why := _misplaced(path)) is not None
    ]
    assert misplaced == [], "test modules outside the package mirror:\n" + "\n".join(misplaced)


@pytest.mark.parametrize(
    ("where", "source"),
    [
        pytest.param("unit/agent/test_x.py", "from tests.test_meta import TESTS", id="from"),
        pytest.param("unit/test_x.py", "import tests.integration.agent.conftest", id="import"),
        pytest.param("unit/test_x.py", "from tests import conftest", id="from package"),
        pytest.param("unit/test_x.py", "from ..test_meta import TESTS", id="relative"),
        pytest.param("test_x.py", "from . import conftest", id="relative package"),
        pytest.param(
            "builders/x.py", "importlib.import_module('tests.test_meta')", id="import_module"
        ),
    ],
)
def test_meta_detects_imports_of_test_modules(where: str, source: str) -> None:
    problems = _test_module_imports(TESTS / where, source)
    assert len(problems) == 1
    assert problems[0].startswith(f"tests/{where}:1 imports tests.")


def test_meta_allows_builders_and_the_fake() -> None:
    here = TESTS / "unit" / "agent" / "test_x.py"
    source = "from tests.builders.clock import FakeClock\nfrom tests.fakeapi import FakeApiServer\n"
    assert _test_module_imports(here, source) == []


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        pytest.param("test_x.py", "not under", id="top of tests/"),
        pytest.param("helpers/test_x.py", "not under", id="unknown folder"),
        pytest.param("unit/test_x.py", "not under", id="no package"),
        pytest.param("integration/daemonset/test_x.py", "not under", id="unit-only package"),
        pytest.param("unit/scheduler/nowhere/test_x.py", "not a subpackage", id="no subpackage"),
        pytest.param("unit/agent/data/test_x.py", "not a subpackage", id="no agent/data"),
    ],
)
def test_meta_detects_misplaced_test_modules(where: str, reason: str) -> None:
    why = _misplaced(TESTS / where)
    assert why is not None
    assert reason in why


def test_meta_accepts_mirrored_test_modules() -> None:
    for where in ("unit/scheduler/runtime/test_x.py", "integration/agent/kube/test_x.py"):
        assert _misplaced(TESTS / where) is None
    assert _misplaced(TESTS / "unit" / "daemonset" / "test_x.py") is None
    assert _misplaced(TESTS / "realk8s" / "test_x.py") is None
    assert _misplaced(TESTS / "realk8s" / "deeper" / "test_x.py") is not None
