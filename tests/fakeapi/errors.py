"""API errors of the fake API server, answered as `Status` objects the way kube-apiserver does.

ApiError(code, reason, message)      any non-2xx answer
  built by: not_found, already_exists, conflict, invalid, bad_request, gone,
            unsupported_media_type, method_not_allowed, internal
"""

from __future__ import annotations

from typing import Any

from tests.fakeapi.resources import ResourceType

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A failure `Status` answer: `code` is the HTTP status, `reason` the Status reason."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "Unknown")  # "": none
        self.details = details

    def status_body(self) -> dict[str, Any]:
        """The `Status` object a real API server sends with this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:
            del body["reason"]  # a Status a handler built itself (e.g. eviction's 500)
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(rt: ResourceType, name: str, sub: str = "") -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": rt.plural + (f"/{sub}" if sub else "")}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{rt.qualified} "{name}" not found', details=_details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        f'{rt.qualified} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(rt, name),
    )


def conflict(rt: ResourceType, name: str, why: str, sub: str = "") -> ApiError:
    what = rt.qualified + (f"/{sub}" if sub else "")
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {what} "{name}": {why}',
        details=_details(rt, name, sub),
    )


def stale(rt: ResourceType, name: str) -> ApiError:
    why = (
        "the object has been modified; "
        "please apply your changes to the latest version and try again"
    )
    return conflict(rt, name, why)


def invalid(rt: ResourceType, name: str, causes: list[str]) -> ApiError:
    """422 Invalid; each cause reads `field: problem`."""
    details = _details(rt, name)
    details["causes"] = [
        {"reason": "FieldValueInvalid", "message": c, "field": c.split(":", 1)[0]} for c in causes
    ]
    kind = rt.kind + (f".{rt.group}" if rt.group else "")
    message = f'{kind} "{name}" is invalid: ' + ", ".join(causes)
    return ApiError(422, message, details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def gone(message: str) -> ApiError:
    return ApiError(410, message)


def method_not_allowed(message: str = "the server does not allow this method") -> ApiError:
    return ApiError(405, message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        f"the body of the request was in an unknown format ({content_type}) - "
        f"accepted media types include: {', '.join(accepted)}",
    )


def internal(message: str) -> ApiError:
    return ApiError(500, message)
