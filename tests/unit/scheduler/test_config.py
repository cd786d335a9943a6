"""`scheduler/config.py`: the shipped defaults and one ConfigError listing every problem."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from agent.errors import ConfigError
from scheduler.config import (
    DEFAULT_CONFIG_PATH,
    SchedulerConfig,
    config_file_argument,
    load_config,
    parse_config,
)
from scheduler.placement import Scoring, default_scoring
from scheduler.preemption import PreemptionSettings


def test_shipped_defaults_match_the_dataclass_and_the_default_scoring():
    loaded = load_config()
    assert loaded.source == str(DEFAULT_CONFIG_PATH)
    assert dict(loaded.weights) == dict(SchedulerConfig().weights)
    assert loaded.topology_levels == SchedulerConfig().topology_levels
    assert "gputopo.io/rack" in loaded.topology_levels
    assert loaded.scheduler_name == "gputopo-scheduler"
    assert loaded.gang_timeout_seconds == 60.0
    assert loaded.candidate_limit == default_scoring().candidate_limit
    names = [s.name for s in loaded.scoring().scores]
    assert names == [s.name for s in default_scoring().scores]


@pytest.mark.parametrize(
    "field_name", [f.name for f in fields(SchedulerConfig) if f.name != "source"]
)
def test_shipped_file_equals_the_dataclass_defaults(field_name: str):
    shipped = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    parsed = parse_config(shipped, source=str(DEFAULT_CONFIG_PATH))
    assert getattr(parsed, field_name) == getattr(SchedulerConfig(), field_name)


def _scoring_settings(scoring: Scoring) -> tuple[object, ...]:
    weights = tuple((s.name, s.weight) for s in scoring.scores)
    return weights, scoring.prefer_used_nodes, scoring.candidate_limit


def test_version_alone_means_the_shipped_policy(tmp_path: Path):
    path = tmp_path / "bare.yaml"
    path.write_text("version: v1\n", encoding="utf-8")
    bare = load_config(path)
    no_file = SchedulerConfig()
    assert _scoring_settings(bare.scoring()) == _scoring_settings(no_file.scoring())
    assert _scoring_settings(bare.scoring()) == _scoring_settings(load_config().scoring())
    assert _scoring_settings(bare.scoring()) == _scoring_settings(default_scoring())
    assert (bare.topology_levels, bare.gang_timeout_seconds, bare.scheduler_name) == (
        no_file.topology_levels,
        no_file.gang_timeout_seconds,
        no_file.scheduler_name,
    )


def test_empty_sections_keep_the_defaults():
    config = parse_config({"version": "v1", "scoring": {}, "gang": {}})
    assert config.gang_timeout_seconds == SchedulerConfig().gang_timeout_seconds
    assert _scoring_settings(config.scoring()) == _scoring_settings(SchedulerConfig().scoring())


def test_partial_file_keeps_defaults(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("version: v1\nscoring:\n  weights: {binpack: 1}\n", encoding="utf-8")
    config = load_config(path)
    assert dict(config.weights) == {"binpack": 1.0}
    assert config.prefer_used_nodes is False
    assert config.candidate_limit == 0
    assert config.leader_elect is None
    assert [s.name for s in config.scoring().scores] == ["binpack"]


def test_run_options_are_read():
    config = parse_config(
        {
            "version": "v1",
            "schedulerName": "other",
            "leaderElect": True,
            "leaderElectNamespace": "ns",
            "metricsAddress": ":0",
            "kubeconfig": "/k",
            "gang": {"scheduleTimeoutSeconds": 5},
            "topologyLevels": ["gputopo.io/rack"],
            "scoring": {"preferUsedNodes": False, "candidateLimit": 0},
        }
    )
    assert (config.scheduler_name, config.leader_elect, config.leader_elect_namespace) == (
        "other",
        True,
        "ns",
    )
    assert (config.metrics_address, config.kubeconfig) == (":0", "/k")
    assert config.gang_timeout_seconds == 5.0
    assert config.topology_levels == ("gputopo.io/rack",)
    assert config.scoring().prefer_used_nodes is False
    assert config.scoring().candidate_limit == 0


def test_every_problem_is_reported_at_once():
    bad = {
        "version": "v2",
        "extra": 1,
        "scoring": {"weights": {"binpack": -1, "nope": 2}, "candidateLimit": "x", "what": 1},
        "gang": {"scheduleTimeoutSeconds": 0},
        "topologyLevels": "rack",
        "leaderElect": "yes",
    }
    with pytest.raises(ConfigError) as info:
        parse_config(bad, source="cfg.yaml")
    text = str(info.value)
    for expected in (
        "cfg.yaml: invalid scheduler config",
        "version: must be v1, got 'v2'",
        "extra: unknown key",
        "scoring.weights.binpack: must be a finite number >= 0, got -1",
        "scoring.weights.nope: unknown score",
        "scoring.candidateLimit: must be an integer >= 0",
        "scoring.what: unknown key",
        "gang.scheduleTimeoutSeconds: must be a finite number > 0",
        "topologyLevels: must be a list of node label names",
        "leaderElect: must be true or false",
    ):
        assert expected in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("version: [", r"bad.yaml:1:11: YAML syntax error: expected", id="bad yaml"),
        pytest.param(
            "version: v1\ngang: {scheduleTimeoutSeconds: 1\nscoring: {}\n",
            r"bad.yaml:3:8: YAML syntax error: expected ',' or '}', but got ':' "
            r"\(while parsing a flow mapping at 2:7\)",
            id="unclosed flow mapping",
        ),
        pytest.param("version: v1\nx: \x01\n", r"bad.yaml: offset 15: character #x0001", id="ctrl"),
        pytest.param("- a\n- b\n", "must be a mapping with `version: v1`", id="not a mapping"),
        pytest.param(
            "scoring: {}\n",
            r"version: missing \(the file must say `version: v1`\)",
            id="no version",
        ),
    ],
)
def test_file_errors_name_the_file(tmp_path: Path, content: str, message: str):
    path = tmp_path / "bad.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("content", "key"),
    [
        pytest.param("scoring: {weights: {fragmentation: .nan}}", "scoring.weights.fragmentation",
                     id="nan weight"),
        pytest.param("scoring: {weights: {topology: .inf}}", "scoring.weights.topology",
                     id="inf weight"),
        pytest.param("gang: {scheduleTimeoutSeconds: .inf}", "gang.scheduleTimeoutSeconds",
                     id="inf timeout"),
        pytest.param("gang: {scheduleTimeoutSeconds: .nan}", "gang.scheduleTimeoutSeconds",
                     id="nan timeout"),
    ],
)  # fmt: skip
def test_not_a_number_and_infinity_are_refused_naming_the_key(tmp_path, content, key):
    path = tmp_path / "cfg.yaml"
    path.write_text(f"version: v1\n{content}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert re.search(
        rf"{re.escape(key)}: must be a finite number .* got (nan|inf)", str(info.value)
    )


def test_a_binary_file_is_refused_in_one_line_naming_it(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_bytes(b"version: v1\n\xff\xfe\x00\x01")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}: not a text file (byte 0xff at offset 12 is not UTF-8); expected YAML"
    )


def test_the_binding_timeout_is_read_and_a_bad_one_named():
    read = parse_config({"version": "v1", "bindingTimeoutSeconds": 30})
    assert read.binding_timeout_seconds == 30
    assert load_config().binding_timeout_seconds == 600  # kube-scheduler's default
    for bad in (0, 1.5, True, "600"):
        with pytest.raises(ConfigError, match="bindingTimeoutSeconds: must be a whole number >= 1"):
            parse_config({"version": "v1", "bindingTimeoutSeconds": bad})


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read the scheduler config"):
        load_config("/nonexistent/gputopo.yaml")


def test_the_preemption_block_is_read_into_the_settings():
    config = parse_config(
        {
            "version": "v1",
            "preemption": {
                "enabled": False,
                "reclaim": True,
                "reclaimToFairShare": True,
                "pdb": "required",
                "nonPreemptiblePriority": 500,
                "nominationTimeoutSeconds": 5,
                "starvationSeconds": 0,
                "starvationHoldSeconds": 30.5,
                "maxStarvationHolds": 0,
            },
        }
    )
    settings = config.preemption
    assert (settings.enabled, settings.reclaim, settings.reclaim_to_fair_share) == (
        False,
        True,
        True,
    )
    assert settings.pdb_required is True
    assert settings.non_preemptible_priority == 500
    assert (settings.nomination_timeout, settings.starvation_seconds) == (5.0, 0.0)
    assert (settings.starvation_hold_seconds, settings.max_starvation_holds) == (30.5, 0)
    assert parse_config({"version": "v1", "preemption": {}}).preemption == PreemptionSettings()


def test_preemption_errors_name_the_key():
    bad = {
        "pdb": "sometimes",
        "enabled": "yes",
        "nominationTimeoutSeconds": -1,
        "starvationHoldSeconds": 0,
        "maxStarvationHolds": 1.5,
        "nonPreemptiblePriority": True,
        "later": 1,
    }
    with pytest.raises(ConfigError) as info:
        parse_config({"version": "v1", "preemption": bad}, source="cfg.yaml")
    text = str(info.value)
    for expected in (
        "preemption.pdb: must be preferred or required, got 'sometimes'",
        "preemption.enabled: must be true or false",
        "preemption.nominationTimeoutSeconds: must be a finite number >= 0, got -1",
        "preemption.starvationHoldSeconds: must be a finite number > 0, got 0",
        "preemption.maxStarvationHolds: must be an integer >= 0, got 1.5",
        "preemption.nonPreemptiblePriority: must be an integer, got True",
        "preemption.later: unknown key",
    ):
        assert expected in text
    with pytest.raises(ConfigError, match="preemption: must be a mapping"):
        parse_config({"version": "v1", "preemption": [1]})


def test_a_config_file_argument_is_checked_when_the_command_line_is_read(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("version: v1\nscoring: {preferUsedNodes: true}\n", encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nscoring: {preferUsedNodes: 3}\n", encoding="utf-8")
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--config", type=config_file_argument)
    assert parser.parse_args(["--config", str(good)]).config == str(good)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--config", str(bad)])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(bad) in err
    assert "scoring.preferUsedNodes" in err
