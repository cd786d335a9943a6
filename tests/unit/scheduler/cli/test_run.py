from __future__ import annotations

import pytest

from agent.errors import ConfigError
from scheduler.cli.run import main
from scheduler.cli.settings import load, read_flags


def write_config(tmp_path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_defaults():
    s = load([], {})
    assert (s.scheduler_name, s.leader_elect, s.leader_elect_namespace, s.metrics_address) == (
        "gputopo-scheduler",
        False,
        "gputopo-system",
        ":9446",
    )
    assert s.kubeconfig is None


def test_flag_beats_env_beats_file(tmp_path):
    cfg = write_config(
        tmp_path,
        "version: v1\nschedulerName: from-file\nleaderElect: true\nmetricsAddress: 127.0.0.1:1\n",
    )
    env = {"GPUTOPO_SCHEDULER_NAME": "from-env", "GPUTOPO_CONFIG": cfg}
    s = load(["--scheduler-name", "from-flag"], env)
    assert s.scheduler_name == "from-flag"
    assert load([], env).scheduler_name == "from-env"
    assert load([], {"GPUTOPO_CONFIG": cfg}).scheduler_name == "from-file"
    assert load([], env).leader_elect is True
    assert load(["--leader-elect=false"], env).leader_elect is False
    assert load([], {**env, "GPUTOPO_LEADER_ELECT": "off"}).leader_elect is False
    assert load([], env).metrics_address == "127.0.0.1:1"


@pytest.mark.parametrize(
    ("argv", "env", "problem"),
    [
        pytest.param(["--bogus"], {}, "unrecognized arguments: --bogus", id="unknown flag"),
        pytest.param(
            ["--leader-elect=maybe"], {}, "--leader-elect: expected true or false", id="bool"
        ),
        pytest.param(["--metrics-address", "nine"], {}, "--metrics-address", id="address"),
        pytest.param(["--log-format", "xml"], {}, "--log-format", id="log format"),
        pytest.param(["--kubeconfig", "/nonexistent/kc"], {}, "no such file", id="kubeconfig"),
        pytest.param([], {"GPUTOPO_CONFIG": "/nonexistent.yaml"}, "cannot read", id="config"),
    ],
)
def test_bad_input_is_one_config_error(argv, env, problem):
    with pytest.raises(ConfigError, match=problem):
        load(argv, env)


def test_main_exits_2_with_one_line(capsys, tmp_path):
    cfg = write_config(tmp_path, "version: v2\n")
    assert main(["--config", cfg]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("gputopo-scheduler run: ")
    assert "version: must be v1" in err


@pytest.mark.parametrize("flag", ["none", "blank", "spaced", "equals", "twice"])
@pytest.mark.parametrize("variable", ["none", "blank", "set"])
def test_the_kubeconfig_the_flags_give_is_the_one_the_settings_use_without_a_file(
    tmp_path, flag, variable
):
    """`run` connects with the flags' kubeconfig before it reads the config file: without a
    file, that is the settings' own."""
    by_flag, by_variable = tmp_path / "flag", tmp_path / "variable"
    by_flag.write_text("")
    by_variable.write_text("")
    argv = {
        "none": [],
        "blank": ["--kubeconfig", ""],
        "spaced": ["--kubeconfig", str(by_flag)],
        "equals": [f"--kubeconfig={by_flag}"],
        "twice": ["--kubeconfig", str(by_variable), "--kubeconfig", str(by_flag)],
    }[flag]
    environ = {
        "none": {},
        "blank": {"GPUTOPO_KUBECONFIG": ""},
        "set": {"GPUTOPO_KUBECONFIG": str(by_variable)},
    }[variable]
    assert read_flags(argv, environ).given_value("kubeconfig") == load(argv, environ).kubeconfig


def test_a_bad_flag_is_refused_before_the_config_file_is_read(tmp_path):
    """The flags are checked on their own (before `run` connects): a bad name is named even
    where the config file would be refused too."""
    config = tmp_path / "bad.yaml"
    config.write_text("version: v9\n")
    with pytest.raises(ConfigError, match="--scheduler-name: 'Bad Name'"):
        read_flags(["--config", str(config), "--scheduler-name", "Bad Name"], {})
    with pytest.raises(ConfigError, match="version"):
        load(["--config", str(config)], {})
