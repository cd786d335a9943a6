"""The suite fails if any test function asserts nothing, or only constants."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
RAISES_NAMES = {"raises", "warns", "fail"}


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
