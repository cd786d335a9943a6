"""Shared pytest configuration. Add plugins to the list; keep fixtures in their own modules."""

pytest_plugins = ["tests.fakeapi.fixtures"]
