"""daemonset/Containerfile: one python:3.11-slim image for both commands, non-root by default."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.builders import render as r

CONTAINERFILE = r.DAEMONSET / "Containerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text(encoding="utf-8"))
    lines = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")
    ]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def test_every_stage_is_python_311_slim():
    bases = [args.split()[0] for op, args in _instructions() if op == "FROM"]
    assert bases
    assert set(bases) == {"python:3.11-slim"}


def test_installs_the_package_with_the_agent_and_scheduler_extras():
    """The base install is only the kubectl plugin's: the image needs both extras."""
    runs = " ".join(args for op, args in _instructions() if op == "RUN")
    assert re.search(r"pip install (--\S+ )*\"?\.\[agent,scheduler\]\"?(\s|$)", runs)


def test_setup_installs_what_the_image_installs_and_the_test_tools():
    setup = (r.REPO / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert 'pip install -q -e ".[agent,scheduler,test]"' in setup


def test_no_entrypoint_or_cmd():
    assert {op for op, _ in _instructions()} & {"ENTRYPOINT", "CMD"} == set()


def test_default_user_is_the_schedulers_non_root_uid(objects):
    users = [args for op, args in _instructions() if op == "USER"]
    assert users
    uid = int(users[-1].split(":")[0])
    assert uid != 0
    scheduler = r.one(objects, "Deployment", "gputopo-scheduler")
    assert scheduler["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == uid


def test_copied_sources_exist_in_the_repository():
    sources = [
        src
        for op, args in _instructions()
        if op == "COPY" and "--from=" not in args
        for src in args.split()[:-1]
    ]
    assert "pyproject.toml" in sources
    missing = [s for s in sources if not (r.REPO / s).exists()]
    assert missing == []


@pytest.mark.parametrize("command", ["gputopo-agent", "gputopo-scheduler"])
def test_manifest_commands_are_console_scripts(objects, command):
    scripts = tomllib.loads((r.REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    commands = {c["command"][0] for o in objects for s in r.pod_specs(o) for c in s["containers"]}
    assert command in commands
    assert command in scripts


def test_containerfile_is_not_a_kustomize_resource():
    assert CONTAINERFILE.is_file()
    assert "Containerfile" not in " ".join(r.kustomization()["resources"])


ARCH_NAMES = re.compile(r"amd64|x86_64|arm64|aarch64", re.IGNORECASE)


def test_nothing_in_the_build_names_an_architecture():
    """Both linux/amd64 and linux/arm64 build from the same instructions: no stage pinned to a
    platform (a build stage on the build machine's platform would copy its venv, with that
    machine's wheels, into the other), no download for one architecture."""
    instructions = _instructions()
    assert [a for op, a in instructions if op == "FROM" and "--platform" in a] == []
    assert [a for _, a in instructions if ARCH_NAMES.search(a)] == []
    assert [a for op, a in instructions if op == "ADD" or re.search(r"\b(curl|wget)\b", a)] == []


def test_the_readme_and_the_containerfile_give_the_multi_arch_build():
    command = "docker buildx build --platform linux/amd64,linux/arm64 -f daemonset/Containerfile"
    readme = (r.REPO / "README.md").read_text(encoding="utf-8")
    assert command in readme
    assert command in CONTAINERFILE.read_text(encoding="utf-8")
    assert "linux/arm64" in readme.split("## Install on a real cluster")[0]  # said at the top
