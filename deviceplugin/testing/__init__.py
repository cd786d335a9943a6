"""Test doubles shipped with the package (the demo uses them too)."""
