"""Load a `bench/` script as a module (the scripts are not a package the tests import)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """`bench/<name>.py`, executed as module `<name>_bench` (registered in `sys.modules`)."""
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH / f"{name}.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses and pickled functions look it up there
    spec.loader.exec_module(module)
    return module
