"""`gputopo-agent run` configuration: precedence, NVIDIA's config file, every error at once."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from agent.cli.config import AgentConfig, load
from agent.cli.config_values import split_host_port
from agent.errors import ConfigError
from agent.shares import Sharing
from deviceplugin.grpc_translation import device_list, to_list_response
from deviceplugin.resources import build_resources
from deviceplugin.settings import (
    MAX_REPLICAS,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    SharedResource,
)
from tests.builders.deviceplugin import make_inventory, settings

ENV = {"NODE_NAME": "node-a"}
GRPC_MAX_RECEIVE = 4 * 1024 * 1024
"""The kubelet's gRPC client default: a bigger ListAndWatch message is dropped whole."""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_follow_the_design():
    cfg = load([], ENV)
    assert isinstance(cfg, AgentConfig)
    assert cfg.node_name == "node-a"
    assert cfg.mig_strategy is MigStrategy.MIXED
    assert cfg.device_plugin_dir == Path("/var/lib/kubelet/device-plugins")
    assert cfg.kubelet_config == Path("/var/lib/kubelet/config.yaml")
    assert (cfg.topology_manager_policy, cfg.topology_manager_scope) == ("none", "container")
    assert cfg.metrics_host_port == ("", 9445)
    assert cfg.plugin.device_list_strategies == (DeviceListStrategy.ENVVAR,)
    assert cfg.plugin.cdi_spec_dirs == (Path("/etc/cdi"), Path("/var/run/cdi"))
    assert (cfg.device_plugin, cfg.publish, cfg.oneshot, cfg.dry_run) == (True, True, False, False)
    assert cfg.node_labels is True


def test_flag_beats_env_beats_file_beats_default(tmp_path):
    path = write(
        tmp_path,
        """
        version: v1
        migStrategy: none
        logFormat: json
        hostRoot: /file-root
        nodeName: from-file
        """,
    )
    env = {"GPUTOPO_MIG_STRATEGY": "single", "GPUTOPO_LOG_FORMAT": "text", **ENV}
    cfg = load(["--config", str(path), "--mig-strategy", "mixed"], env)
    assert cfg.mig_strategy is MigStrategy.MIXED  # flag
    assert cfg.log_format == "text"  # env over file
    assert cfg.host_root == Path("/file-root")  # file over default
    assert cfg.node_name == "node-a"  # NODE_NAME is an environment variable: over the file
    assert load(["--config", str(path)], {}).node_name == "from-file"
    assert cfg.config_file == path


def test_node_name_env_precedence():
    assert load([], {"GPUTOPO_NODE_NAME": "x", "NODE_NAME": "y"}).node_name == "x"
    assert load(["--node-name", "z"], {"NODE_NAME": "y"}).node_name == "z"


def test_boolean_flags_env_and_values():
    cfg = load(["--no-device-plugin", "--dry-run=false"], {"GPUTOPO_NO_PUBLISH": "yes", **ENV})
    assert (cfg.device_plugin, cfg.dry_run, cfg.publish) == (False, False, False)
    assert load(["--node-labels", "off"], ENV).node_labels is False


def test_nvidia_device_plugin_config_is_accepted_unchanged(tmp_path):
    path = write(
        tmp_path,
        """
        version: v1
        flags:
          migStrategy: "single"
          failOnInitError: false
          nvidiaDriverRoot: "/run/nvidia/driver"
          gfd:
            oneshot: false
          plugin:
            passDeviceSpecs: true
            deviceListStrategy: ["envvar", "volume-mounts"]
            deviceIDStrategy: index
        sharing:
          timeSlicing:
            renameByDefault: true
            failRequestsGreaterThanOne: true
            resources:
            - name: nvidia.com/gpu
              replicas: 4
        """,
    )
    cfg = load(["--config", str(path)], ENV)
    assert cfg.mig_strategy is MigStrategy.SINGLE
    assert cfg.fail_on_init_error is False
    assert cfg.plugin.pass_device_specs is True
    assert cfg.plugin.device_list_strategies == (
        DeviceListStrategy.ENVVAR,
        DeviceListStrategy.VOLUME_MOUNTS,
    )
    assert cfg.plugin.device_id_strategy is DeviceIdStrategy.INDEX
    ts = cfg.plugin.time_slicing
    assert ts.rename_by_default
    assert ts.fail_requests_greater_than_one
    assert ts.resources == (SharedResource(name="nvidia.com/gpu", replicas=4),)


def test_config_file_via_environment_and_yaml_on_off(tmp_path):
    path = write(tmp_path, "version: v1\nnodeLabels: off\ncdiSpecDirs: [/a, /b]\n")
    cfg = load([], {"GPUTOPO_CONFIG": str(path), **ENV})
    assert cfg.node_labels is False
    assert cfg.plugin.cdi_spec_dirs == (Path("/a"), Path("/b"))


def test_dp_health_variables_are_honoured():
    cfg = load([], {"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "79", **ENV})
    assert cfg.plugin.xid_policy.ignores(48)
    assert not cfg.plugin.xid_policy.ignores(79)


def test_every_problem_is_reported_in_one_error(tmp_path):
    path = write(
        tmp_path,
        """
        version: v2
        migStrategy: half
        bogus: 1
        flags:
          migStrategy: none
          plugin: {deviceListStrategy: cdi-annotations, colour: red}
        sharing:
          mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}
          timeSlicing:
            resources:
            - {name: example.com/tpu, replicas: 0}
            - {name: nvidia.com/gpu, replicas: 2, devices: {}}
        """,
    )
    env = {"GPUTOPO_ONESHOT": "perhaps", "DP_DISABLE_HEALTHCHECKS": "x1", **ENV}
    with pytest.raises(ConfigError) as info:
        load(["--config", str(path), "--metrics-address", "nowhere"], env)
    message = str(info.value)
    for expected in (
        "version: expected 'v1', got 'v2'",
        "bogus: unknown key",
        "flags.migStrategy: 'none' contradicts migStrategy: 'half'",
        "flags.plugin.colour: unknown key",
        "flags.plugin.deviceListStrategy: ['cdi-annotations'] not supported",
        "sharing: timeSlicing and mps are exclusive; give one",
        "resources[0].name: expected nvidia.com/gpu",
        "resources[0].replicas: expected an integer >= 1, got 0",
        "resources[1].devices: expected all, a count",
        "flag --metrics-address: 'nowhere' is not HOST:PORT",
        "environment GPUTOPO_ONESHOT: expected true or false, got 'perhaps'",
        "DP_DISABLE_HEALTHCHECKS: 'x1' is not an Xid number",
    ):
        assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        pytest.param(
            ["--mig-strategy", "all"], r"'all' is not one of none, single, mixed", id="choice"
        ),
        pytest.param(["--frobnicate"], r"unrecognized arguments: --frobnicate", id="unknown flag"),
        pytest.param(["--health-quiet-period", "-1"], r"positive number of seconds", id="seconds"),
        pytest.param(["--config", "/nonexistent/x.yaml"], r"cannot read it", id="missing file"),
    ],
)
def test_bad_flags_raise_config_error(argv, match):
    with pytest.raises(ConfigError, match=match):
        load(argv, ENV)


def test_a_non_mapping_file_is_refused(tmp_path):
    path = write(tmp_path, "- just\n- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping with `version: v1`"):
        load(["--config", str(path)], ENV)


@pytest.mark.parametrize(
    ("address", "expected"),
    [(":9445", ("", 9445)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:80", ("::1", 80))],
)
def test_split_host_port(address, expected):
    assert split_host_port(address) == expected


def sharing_file(tmp_path: Path, *entries: str, rename_by_default: bool = False) -> Path:
    lines = "".join(f"\n            - {e}" for e in entries)
    return write(
        tmp_path,
        f"""
        version: v1
        sharing:
          timeSlicing:
            renameByDefault: {str(rename_by_default).lower()}
            resources:{lines}
        """,
    )


@pytest.mark.parametrize(
    ("rename", "advertised"),
    [
        pytest.param("gpu-shared", "nvidia.com/gpu-shared", id="bare tail"),
        pytest.param("example.com/gpu", "example.com/gpu", id="own domain"),
        pytest.param("gpu.example.com/A100_80GB", "gpu.example.com/A100_80GB", id="mixed case"),
        pytest.param("nvidia.com/gpu", "nvidia.com/gpu", id="its own name"),
    ],
)
def test_valid_renames_are_accepted(tmp_path, rename, advertised):
    path = sharing_file(tmp_path, f"{{name: nvidia.com/gpu, replicas: 2, rename: '{rename}'}}")
    (entry,) = load(["--config", str(path)], ENV).plugin.time_slicing.resources
    assert entry.advertised_name(rename_by_default=False) == advertised


@pytest.mark.parametrize(
    ("rename", "reason"),
    [
        pytest.param("Bad Name!", r"the part after / \('Bad Name!'\) must be 1-63", id="space"),
        pytest.param("kubernetes.io/gpu", "kubernetes.io/ domain is reserved", id="k8s domain"),
        pytest.param("node.kubernetes.io/gpu", "kubernetes.io/ domain", id="k8s subdomain"),
        pytest.param("requests.example.com/gpu", "reserved for quota", id="quota prefix"),
        pytest.param("Example.com/gpu", "'Example.com' is not a lowercase DNS", id="upper domain"),
        pytest.param("example.com/a/b", "more than one /", id="two slashes"),
        pytest.param("example.com/" + "g" * 64, "must be 1-63", id="64-char name"),
        pytest.param("example.com/gpu-", "must be 1-63", id="ends with dash"),
        pytest.param("a" * 245 + ".com/gpu", "at most 244 characters", id="long domain"),
    ],
)
def test_renames_the_kubelet_refuses_are_refused_at_load(tmp_path, rename, reason):
    path = sharing_file(tmp_path, f"{{name: nvidia.com/gpu, replicas: 2, rename: '{rename}'}}")
    with pytest.raises(ConfigError) as info:
        load(["--config", str(path)], ENV)
    message = str(info.value)
    assert f"sharing.timeSlicing.resources[0].rename: {rename!r} advertises" in message
    assert ", a name the kubelet refuses: " in message
    assert re.search(reason, message), message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("entries", "rename_by_default", "expected"),
    [
        pytest.param(
            ("{name: nvidia.com/gpu, replicas: 2}", "{name: nvidia.com/mig-1g.10gb, replicas: 2, "
             "rename: gpu.shared}"),
            True,
            "resources[1].rename: 'gpu.shared' advertises nvidia.com/gpu.shared, the same name as "
            "resources[0]",
            id="rename meets .shared",
        ),
        pytest.param(
            ("{name: nvidia.com/mig-1g.10gb, replicas: 2, rename: example.com/shared}",
             "{name: nvidia.com/mig-2g.20gb, replicas: 2, rename: example.com/shared}"),
            False,
            "resources[1].rename: 'example.com/shared' advertises example.com/shared, the same "
            "name as resources[0]",
            id="two renames",
        ),
        pytest.param(
            ("{name: nvidia.com/mig-1g.10gb, replicas: 2, rename: nvidia.com/gpu}",),
            False,
            "resources[0].rename: 'nvidia.com/gpu' advertises nvidia.com/gpu, a name the device "
            "plugin advertises itself",
            id="onto whole GPUs",
        ),
        pytest.param(
            ("{name: nvidia.com/mig-1g.10gb, replicas: 2, rename: mig-2g.20gb}",),
            False,
            "resources[0].rename: 'mig-2g.20gb' advertises nvidia.com/mig-2g.20gb, a name the "
            "device plugin advertises itself",
            id="onto another MIG profile",
        ),
    ],
)  # fmt: skip
def test_colliding_names_are_refused_at_load(tmp_path, entries, rename_by_default, expected):
    path = sharing_file(tmp_path, *entries, rename_by_default=rename_by_default)
    with pytest.raises(ConfigError) as info:
        load(["--config", str(path)], ENV)
    assert expected in str(info.value)


def test_rename_by_default_names_are_not_collisions(tmp_path):
    path = sharing_file(
        tmp_path,
        "{name: nvidia.com/gpu, replicas: 2}",
        "{name: nvidia.com/mig-1g.10gb, replicas: 2, rename: nvidia.com/mig-1g.10gb.shared}",
        "{name: nvidia.com/mig-2g.20gb, replicas: 2}",
        rename_by_default=True,
    )
    ts = load(["--config", str(path)], ENV).plugin.time_slicing
    assert [r.advertised_name(ts.rename_by_default) for r in ts.resources] == [
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb.shared",
        "nvidia.com/mig-2g.20gb.shared",
    ]


@pytest.mark.parametrize("replicas", [257, 10_000, 200_000])
def test_replicas_above_the_bound_are_refused_naming_the_field(tmp_path, replicas):
    path = sharing_file(tmp_path, f"{{name: nvidia.com/gpu, replicas: {replicas}}}")
    with pytest.raises(ConfigError) as info:
        load(["--config", str(path)], ENV)
    assert f"sharing.timeSlicing.resources[0].replicas: at most {MAX_REPLICAS}" in str(info.value)
    assert f"got {replicas:,}" in str(info.value)


def test_the_replica_bound_keeps_the_largest_node_in_one_grpc_message(tmp_path):
    path = sharing_file(tmp_path, f"{{name: nvidia.com/mig-1g.10gb, replicas: {MAX_REPLICAS}}}")
    time_slicing = load(["--config", str(path)], ENV).plugin.time_slicing
    inventory = make_inventory(16, mig={g: ["1g.10gb"] * 7 for g in range(16)})
    (resource,) = build_resources(inventory, settings(time_slicing=time_slicing))
    unhealthy = frozenset(g.uuid for g in inventory.gpus)  # "Unhealthy": the longer word
    message = to_list_response(device_list(resource, unhealthy))
    assert len(message.devices) == 16 * 7 * MAX_REPLICAS
    assert message.ByteSize() < GRPC_MAX_RECEIVE // 2


def test_a_binary_config_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"version: v1\n\xff\xfe\x00binary")
    with pytest.raises(ConfigError) as info:
        load(["--config", str(path)], ENV)
    assert str(info.value) == (
        f"invalid configuration: config file {path}: not a text file "
        "(byte 0xff at offset 12 is not UTF-8); expected YAML"
    )


def test_a_yaml_syntax_error_is_one_line_with_line_and_column(tmp_path):
    path = write(tmp_path, "version: v1\nfoo: [1, 2\nbar: 3\n")
    with pytest.raises(ConfigError) as info:
        load(["--config", str(path)], ENV)
    assert str(info.value) == (
        f"invalid configuration: config file {path}:3:4: YAML syntax error: expected ',' or ']', "
        "but got ':' (while parsing a flow sequence at 2:6)"
    )


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
def test_seconds_must_be_finite(tmp_path, value):
    path = write(tmp_path, f"version: v1\nhealthQuietPeriod: {value}\n")
    with pytest.raises(ConfigError, match=rf"{path}: healthQuietPeriod: expected a \w+ number"):
        load(["--config", str(path)], ENV)


def mps_file(tmp_path: Path, entry: str, extra: str = "") -> Path:
    return write(
        tmp_path,
        f"""
        version: v1
        sharing:
          mps:
            {extra}
            resources:
            - {entry}
        """,
    )


def test_mps_sharing_is_read_in_nvidias_format_with_one_replica_per_container(tmp_path):
    cfg = load(["--config", str(mps_file(tmp_path, "{name: nvidia.com/gpu, replicas: 48}"))], ENV)
    sharing = cfg.plugin.time_slicing
    assert (sharing.sharing, sharing.fail_requests_greater_than_one) == (Sharing.MPS, True)
    assert [(r.name, r.replicas) for r in sharing.resources] == [("nvidia.com/gpu", 48)]


@pytest.mark.parametrize(
    ("entry", "extra", "match"),
    [
        pytest.param("{name: nvidia.com/gpu, replicas: 49}", "",
                     "sharing.mps.resources[0].replicas: at most 48 (CUDA MPS clients per GPU), "
                     "got 49", id="49 clients"),
        pytest.param("{name: nvidia.com/mig-1g.10gb, replicas: 2}", "",
                     "sharing.mps.resources[0].name: MPS shares whole GPUs (nvidia.com/gpu), not "
                     "nvidia.com/mig-1g.10gb", id="MIG"),
        pytest.param("{name: nvidia.com/gpu, replicas: 2}", "failRequestsGreaterThanOne: false",
                     "sharing.mps.failRequestsGreaterThanOne: MPS serves one replica per "
                     "container", id="more than one"),
    ],
)  # fmt: skip
def test_bad_mps_sharing_is_named(tmp_path, entry, extra, match):
    with pytest.raises(ConfigError, match=re.escape(match)):
        load(["--config", str(mps_file(tmp_path, entry, extra))], ENV)


def test_sharing_some_gpus_needs_a_renamed_resource(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("resources[0].devices: sharing only some")):
        load(["--config", str(mps_file(tmp_path, "{name: nvidia.com/gpu, replicas: 2, "
                                                  "devices: [0, 1]}"))], ENV)  # fmt: skip
    path = mps_file(tmp_path, "{name: nvidia.com/gpu, replicas: 2, devices: [0, 1]}",
                    "renameByDefault: true")  # fmt: skip
    assert load(["--config", str(path)], ENV).plugin.time_slicing.rename_by_default
