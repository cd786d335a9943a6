"""`bench/living_cluster.py --studies`: the built-in workload, the trace, and the issue 27 mixes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[4] / "bench" / "living_cluster.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("living_cluster_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mixes_expand_to_the_four_check_mixes_in_order():
    bench = _bench()
    names = bench.study_names("builtin, mixes")
    assert names == ["builtin", "mix-burst", "mix-wide", "mix-single", "mix-stream"]
    assert bench.study_names("mix-single,trace") == ["mix-single", "trace"]


def test_an_unknown_study_is_one_line_naming_it():
    with pytest.raises(ValueError, match=r"unknown study 'mix-huge' \(known: builtin, trace, "):
        _bench().study_names("builtin,mix-huge")


def test_each_mix_runs_on_the_built_in_cluster_with_its_own_jobs():
    bench = _bench()
    builtin_cluster, builtin_jobs = bench.inputs("builtin")
    for mix in bench.MIXES:
        cluster, workload = bench.inputs(f"mix-{mix}")
        assert cluster == builtin_cluster
        assert workload.jobs
        assert workload.jobs != builtin_jobs.jobs
    _cluster, single = bench.inputs("mix-single")
    assert {j.pod.gpus for j in single.jobs if not j.is_gang} >= {1, 4, 8}
