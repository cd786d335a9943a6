"""What every scheduler API call shares, and the watch stream a watch opens.

`api_call` turns urllib3's transport exceptions into `ApiError`s naming the
operation (HTTP status 0 for a transport failure; `ConflictError` for 409, `GoneError` for 410,
`NotFoundError` for 404); `Kind` names a collection; `WatchStream` splits a watch's raw response
into lines and decodes each event once, straight into a dict (`decode`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agent.kube.transport import TRANSPORT_ERRORS, transport_reason
from scheduler.errors import ApiError, ConflictError, GoneError, NotFoundError
from scheduler.kubeapi.decode import WHOLE, Decoder

__all__ = ["Kind", "WatchStream", "api_call", "error_class"]

_BY_STATUS: dict[int, type[ApiError]] = {409: ConflictError, 410: GoneError, 404: NotFoundError}


def error_class(status: int) -> type[ApiError]:
    """The `ApiError` subclass for an HTTP status (`ApiError` itself for any other)."""
    return _BY_STATUS.get(status, ApiError)


@contextmanager
def api_call(operation: str) -> Iterator[None]:
    """Translate a failed transport (no answer) into an `ApiError` naming `operation`."""
    try:
        yield
    except TRANSPORT_ERRORS as exc:
        raise ApiError(operation, 0, transport_reason(exc)) from exc


@dataclass(frozen=True, slots=True)
class Kind:
    """A watched collection: the core group (`group == ""`) or a custom resource."""

    name: str
    group: str = ""
    version: str = "v1"
    plural: str = ""


def _lines(resp: Any) -> Iterator[bytes]:
    """The non-empty lines of a watch stream, as they arrive (one JSON event each)."""
    rest = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        lines = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line:
                yield line
    if rest:
        yield rest


class WatchStream:
    """One open watch: iterate `events()`; `close()` from another thread ends it at once."""

    def __init__(self, kind: Kind, resp: Any, decoder: Decoder = WHOLE) -> None:
        self.kind, self._resp, self._decoder = kind, resp, decoder

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) pairs; GoneError when the resourceVersion is too old."""
        operation = f"watch {self.kind.name}"
        try:
            with api_call(operation):
                for line in _lines(self._resp):
                    etype, obj = self._decoder.event(line)
                    if etype == "ERROR":
                        code = int(obj.get("code") or 0)
                        raise error_class(code)(operation, code, str(obj.get("message")))
                    yield etype, obj
        except (ValueError, AttributeError) as exc:
            raise ApiError(operation, 0, f"bad watch stream: {exc}") from exc
        finally:
            self._resp.close()
            self._resp.release_conn()

    def close(self) -> None:
        try:
            self._resp.shutdown()
        except (OSError, AttributeError):
            self._resp.close()
