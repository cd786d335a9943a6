"""`bench/static_ceiling.py`: exact bin packing; the free capacity at saturation, split exactly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders.benchscripts import load_bench

# 23 nodes of 4 GPUs and one whose 6 cores feed one 1-GPU pod, not four: its other GPUs can
# stay whole and free at saturation
NODES = (
    "sn,cpu_milli,memory_mib,gpu,model\n"
    + "".join(f"openb-node-{i:04d},64000,262144,4,V100M16\n" for i in range(23))
    + "openb-node-0023,6000,262144,4,V100M16\n"
)
MIX = [(4000, 1000)] * 12 + [(2000, 810)] * 5 + [(2000, 470)] * 4 + [(2000, 320)] * 3
MIX += [(1000, 650)] * 2 + [(1000, 160)] * 2
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time\n"
    + "".join(
        f"openb-pod-{i:04d},{cpu},8192,1,{milli},,LS,Running,{i}\n"
        for i, (cpu, milli) in enumerate(MIX)
    )
)


def _traces(root: Path) -> str:
    folder = root / "alibaba-cluster-trace-gpu-v2023"
    folder.mkdir()
    (folder / "openb_node_list_gpu_node.csv").write_text(NODES, encoding="utf-8")
    (folder / "openb_pod_list_tiny.csv").write_text(PODS, encoding="utf-8")
    return str(root)


def test_first_fit_decreasing_can_need_a_gpu_more_than_the_optimum() -> None:
    bench = load_bench("static_ceiling")
    sizes = [440, 440, 330, 330, 230, 230]  # optimum: two GPUs of 440 + 330 + 230
    assert bench.first_fit_decreasing(sizes) == 3
    assert bench.optimal_bins(sizes) == 2


@pytest.mark.parametrize(
    ("sizes", "gpus"),
    [([], 0), ([1000, 1000, 1000], 3), ([810, 190], 1), ([810, 200], 2), ([333, 333, 334], 1)],
)
def test_the_optimum_of_small_packings(sizes: list[int], gpus: int) -> None:
    assert load_bench("static_ceiling").optimal_bins(sizes) == gpus


def test_a_size_a_gpu_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match=r"sizes must lie in 1\.\.1000"):
        load_bench("static_ceiling").optimal_bins([1200])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([50, 160, 190, 230, 320, 470, 530, 650, 810, 1000]), max_size=14))
def test_the_optimum_lies_between_the_bounds_and_first_fit_decreasing(sizes: list[int]) -> None:
    bench = load_bench("static_ceiling")
    optimum = bench.optimal_bins(sizes)
    assert optimum <= bench.first_fit_decreasing(sizes)
    assert optimum >= math.ceil(sum(sizes) / 1000)
    assert optimum >= sum(1 for s in sizes if s > 500)


def test_the_free_capacity_at_saturation_is_split_exactly(tmp_path: Path) -> None:
    bench = load_bench("static_ceiling")
    root = _traces(tmp_path)
    runs = [bench.one_run(root, "tiny", p, s) for p in ("gputopo", "bestfit") for s in (42, 43)]
    for run in runs:
        assert run.saturated, run
        assert run.free == pytest.approx(100.0 - run.allocated)
        assert run.share_gpus >= run.optimum >= 1
        assert run.ceiling == pytest.approx(run.alloc_130 + run.packing_overhead)
    # the starved node's GPUs and a packing worse than the optimum both show somewhere
    assert any(run.whole_free > 0 for run in runs)
    assert any(run.packing_overhead > 0 for run in runs)


def test_the_study_prints_a_row_per_run_and_a_mean_per_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--traces", _traces(tmp_path), "--variants", "tiny", "--seeds", "42-43", "--jobs", "1"]
    assert load_bench("static_ceiling").main([*argv, "--policies", "gputopo,fgd"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "== tiny"
    assert lines[2].split()[:3] == ["policy", "seed", "alloc@130"]
    assert [line.split()[:2] for line in lines[3:9]] == [
        ["gputopo", "42"],
        ["gputopo", "43"],
        ["gputopo", "mean"],
        ["fgd", "42"],
        ["fgd", "43"],
        ["fgd", "mean"],
    ]
    assert lines[9].startswith("4 runs in ")


def test_an_unknown_policy_is_named_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--traces", _traces(tmp_path), "--variants", "tiny", "--policies", "gputopo,fdg"]
    assert load_bench("static_ceiling").main(argv) == 2
    out = capsys.readouterr().out
    assert out.startswith("static_ceiling: --policies: unknown policy 'fdg'")


def test_without_scipy_it_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = load_bench("static_ceiling")
    found = bench.importlib.util.find_spec
    monkeypatch.setattr(
        bench.importlib.util, "find_spec", lambda name: None if name == "scipy" else found(name)
    )
    assert bench.main(["--traces", _traces(tmp_path), "--variants", "tiny"]) == 2
    assert 'pip install -e ".[study]"' in capsys.readouterr().out
