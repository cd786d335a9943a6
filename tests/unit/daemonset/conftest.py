"""Session fixtures: the rendered install and CRDs (kubectl kustomize, or the fallback) and the
examples."""

from __future__ import annotations

import pytest

from tests.builders import render as r


@pytest.fixture(scope="session")
def rendered() -> r.Rendered:
    return r.render()


@pytest.fixture(scope="session")
def objects(rendered: r.Rendered) -> tuple[r.Obj, ...]:
    return rendered.objects


@pytest.fixture(scope="session")
def crds() -> list[r.Obj]:
    """`kubectl apply -k daemonset/crds/`: applied apart from the install."""
    return r.by_kind(r.render(r.CRDS).objects, "CustomResourceDefinition")


@pytest.fixture(scope="session")
def examples() -> dict[str, list[r.Obj]]:
    return r.load_examples()
