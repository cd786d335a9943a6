"""`FakeClock`: the injectable `clock: Callable[[], float]` of the code under test, for tests."""

from __future__ import annotations


class FakeClock:
    """Time that moves only when a test advances it or the code under test sleeps on it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        """A `sleep` to inject alongside the clock: returns at once, `seconds` later."""
        self.now += max(seconds, 0.0)
