"""Errors raised by the scheduler runtime.

    SchedulerError
    ├── ApiError(operation, status)   a Kubernetes API call failed (status 0: server not reached)
    │   ├── ConflictError             409: the object changed, or the pod is already bound
    │   ├── GoneError                 410: a watch's resourceVersion is too old; list again
    │   └── NotFoundError             404
    └── LeaseConflictError            the Lease changed under us (409 on write): another replica won

Bad flags, environment or config files raise `agent.errors.ConfigError`, shared by every command.
"Does not fit" is never an error: placement returns it as a decision with reasons.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Root of the scheduler's errors."""


class ApiError(SchedulerError):
    """A failed API call: `status` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, operation: str, status: int, message: str) -> None:
        text = f"{operation}: HTTP {status}: {message}" if status else f"{operation}: {message}"
        super().__init__(text)
        self.operation, self.status = operation, status


class ConflictError(ApiError):
    """409: the object changed, or (for a binding) the pod is already bound."""


class GoneError(ApiError):
    """410: a watch's resourceVersion is too old; list again."""


class NotFoundError(ApiError):
    """404."""


class LeaseConflictError(SchedulerError):
    """The Lease changed under us (HTTP 409): someone else wrote it first."""
