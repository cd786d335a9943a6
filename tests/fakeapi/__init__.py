"""A fake Kubernetes API server over real HTTP, for tests that use the real `kubernetes` client."""

from tests.fakeapi.server import DEFAULT_CAPACITY, FakeApiServer, RecordedRequest

__all__ = ["DEFAULT_CAPACITY", "FakeApiServer", "RecordedRequest"]
