"""Why a Kubernetes API call got no answer: the exceptions that mean it and a few words for logs.

Light (urllib3 only): the scheduler, which talks to the API without the `kubernetes` client,
imports it at start-up.
"""

from __future__ import annotations

import urllib3

TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)
"""A call that got no HTTP answer: connection refused, timeout, TLS, a broken stream."""


def transport_reason(exc: BaseException) -> str:
    """Why a call got no answer, in a few words: `Connection refused`, `read timed out`."""
    chain = _chain(exc)
    for link in chain:
        if isinstance(link, OSError) and link.strerror:
            return str(link.strerror)
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return "read timed out"
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return "connect timed out"
    last = chain[-1]
    return f"{type(last).__name__}: {last}" if str(last) else type(last).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what it wraps: a retry error's reason, `raise ... from`, exceptions in `args`."""
    chain = [exc]
    while len(chain) < 8:
        last = chain[-1]
        reason = getattr(last, "reason", None)
        inner = next((arg for arg in last.args if isinstance(arg, BaseException)), None)
        nxt = last.__cause__ or (reason if isinstance(reason, BaseException) else inner)
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
    return chain
