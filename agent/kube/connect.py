"""Connecting to the Kubernetes API, for every Kubernetes edge of gputopo: the agent's publisher,
`kubectl gputopo` and the scheduler's client.

- Credentials: an explicit kubeconfig file when given; else the in-cluster service account, then
  `~/.kube/config`. `load_configuration` raises the client's own errors (`CREDENTIAL_ERRORS`);
  `load_api_client` turns them into the agent's `ConfigError`.
- No retries inside the client (`retries = False`): urllib3's default retries each failed call
  three times, logging a warning each time, and hides the failure from the caller's own loop.
  Every caller retries with its own backoff (the publisher, leader election, the informers) and
  logs one line per failure.
- Failed calls: `ApiException` is an HTTP answer (`status_message` reads the API's `Status`
  message out of it); `TRANSPORT_ERRORS` are calls that got no answer at all (`transport_reason`
  says why in a few words). Each client raises its own package's errors from these
  (`agent.errors.PublishError`, `scheduler.errors.ApiError`).
- `read_or_none`: a read of an object that may not exist (404 is None, not an error).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from agent.errors import ConfigError

CREDENTIAL_ERRORS = (ConfigException, OSError, TypeError, ValueError)
"""What the client raises for missing, unreadable or malformed credentials."""

TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)
"""A call that got no HTTP answer: connection refused, timeout, TLS, a broken stream."""

Response = TypeVar("Response")


def load_configuration(
    kubeconfig: str | Path | None = None, context: str | None = None
) -> client.Configuration:
    """`kubeconfig` when given; else in-cluster, then `$KUBECONFIG` or `~/.kube/config`.
    `context` (a kubeconfig context) skips the in-cluster credentials."""
    configuration = client.Configuration()
    if kubeconfig or context:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig else None,
            context=context,
            client_configuration=configuration,
        )
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.retries = False  # one attempt per call: the caller retries (module docstring)
    return configuration


def load_api_client(
    kubeconfig: str | Path | None = None, context: str | None = None
) -> client.ApiClient:
    """An API client from `load_configuration`; ConfigError says why there is none."""
    if kubeconfig and not Path(kubeconfig).is_file():
        raise ConfigError(f"no usable Kubernetes credentials: no kubeconfig file {kubeconfig}")
    try:
        configuration = load_configuration(kubeconfig, context)
    except CREDENTIAL_ERRORS as exc:
        where = str(kubeconfig or ("~/.kube/config" if context else "in-cluster or ~/.kube/config"))
        if context:
            where = f"{where}, context {context}"
        raise ConfigError(f"no usable Kubernetes credentials ({where}): {exc}") from None
    return client.ApiClient(configuration)


def status_message(exc: ApiException) -> str:
    """The `message` of the `Status` the API server answered with, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


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


def read_or_none(call: Callable[[], Response]) -> Response | None:
    """`call()`, or None when the object does not exist (HTTP 404); other failures propagate."""
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
