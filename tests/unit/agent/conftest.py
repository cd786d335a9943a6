"""Fixtures for the agent unit tests: `backend_for` (NVML over the fake pynvml) and `control`
(the stand-in `nvidia-cuda-mps-control`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent.nvml.fake_pynvml import FakePynvml
from agent.nvml.pynvml_backend import PynvmlBackend
from tests.builders import nvml as nvml_helpers
from tests.builders.mps import StandInControl, stand_in_control


@pytest.fixture
def backend_for() -> Iterator[Callable[..., tuple[PynvmlBackend, FakePynvml]]]:
    """`backend_for(fixture, **fake_options)`: a backend over the fake, closed after the test."""
    opened: list[PynvmlBackend] = []

    def make(fixture: Any, **options: Any) -> tuple[PynvmlBackend, FakePynvml]:
        backend, fake = nvml_helpers.backend_for(fixture, **options)
        opened.append(backend)
        return backend, fake

    yield make
    for backend in opened:
        backend.close()


@pytest.fixture
def control() -> Iterator[StandInControl]:
    """A stand-in `nvidia-cuda-mps-control` in its own directory; its daemons are gone after."""
    stand_in = stand_in_control()
    yield stand_in
    stand_in.remove()
