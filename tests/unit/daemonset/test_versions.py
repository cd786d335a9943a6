"""The Kubernetes versions the README promises: the oldest is the one the manifests validate
against, and each optional part that needs a newer API says so where it is described."""

from __future__ import annotations

import re

import pytest

from tests.builders import render as r

README = (r.REPO / "README.md").read_text(encoding="utf-8")
TOP = README.split("\n## ", 1)[0]
OLDEST = "1.30"
ADMISSION_POLICY = "ValidatingAdmissionPolicy"


def _parts_with_admission_policies() -> list[str]:
    return sorted(
        str(p.parent.relative_to(r.DAEMONSET))
        for p in r.OPTIONAL.rglob("kustomization.yaml")
        if any(
            f"kind: {ADMISSION_POLICY}" in f.read_text(encoding="utf-8")
            for f in p.parent.glob("*.yaml")
        )
    )


def test_the_top_of_the_readme_says_which_kubernetes_versions():
    assert re.search(rf"Kubernetes \*\*{re.escape(OLDEST)} or newer\*\*", TOP)


def test_the_oldest_version_is_the_one_the_schema_tests_validate_against():
    for test in ("test_schemas.py", "test_admission_policy.py", "test_queue_label_policy.py"):
        text = (r.REPO / "tests" / "unit" / "daemonset" / test).read_text(encoding="utf-8")
        assert f'K8S_VERSION = "{OLDEST}"' in text, test


def test_the_parts_that_need_validating_admission_policy_are_those_the_readme_names():
    assert _parts_with_admission_policies() == [
        "optional/admission",
        "optional/dra",
        "optional/queue-label",
    ]


def _says_at_least_the_oldest(text: str) -> bool:
    """`Kubernetes >= 1.N` with 1.N no older than OLDEST (the DRA driver needs 1.34)."""
    stated = re.findall(r"Kubernetes >= 1\.(\d+)", text)
    return any(int(minor) >= int(OLDEST.split(".")[1]) for minor in stated)


@pytest.mark.parametrize("part", _parts_with_admission_policies())
def test_each_part_that_needs_validating_admission_policy_says_so_where_it_is(part):
    kustomization = (r.DAEMONSET / part / "kustomization.yaml").read_text(encoding="utf-8")
    assert _says_at_least_the_oldest(kustomization)
    assert f"daemonset/{part}/" in TOP
    (row,) = [
        line
        for line in (r.DAEMONSET / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith(f"| `{part}/`")
    ]
    assert _says_at_least_the_oldest(row)


def test_an_older_version_than_the_oldest_does_not_count():
    assert not _says_at_least_the_oldest("Kubernetes >= 1.29")
    assert _says_at_least_the_oldest("Kubernetes >= 1.34")
