"""Connecting to the Kubernetes API, for every Kubernetes edge of gputopo: the agent's publisher,
`kubectl gputopo` and the scheduler's client.

- Credentials: an explicit kubeconfig file when given; else the in-cluster service account, then
  `~/.kube/config`. `load_configuration` raises the client's own errors (`CREDENTIAL_ERRORS`);
  `load_api_client` turns them into the agent's `ConfigError`.
- Failed calls: `ApiException` is an HTTP answer (`status_message` reads the API's `Status`
  message out of it); `TRANSPORT_ERRORS` are calls that got no answer at all. Each client raises
  its own package's errors from these (`agent.errors.PublishError`, `scheduler.errors.ApiError`).
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


def load_configuration(kubeconfig: str | Path | None = None) -> client.Configuration:
    """`kubeconfig` when given; else in-cluster, then `~/.kube/config`."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=configuration
        )
        return configuration
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return configuration


def load_api_client(kubeconfig: str | Path | None = None) -> client.ApiClient:
    """An API client from `load_configuration`; ConfigError says why there is none."""
    try:
        configuration = load_configuration(kubeconfig)
    except CREDENTIAL_ERRORS as exc:
        where = kubeconfig or "in-cluster or ~/.kube/config"
        raise ConfigError(f"no usable Kubernetes credentials ({where}): {exc}") from None
    return client.ApiClient(configuration)


def status_message(exc: ApiException) -> str:
    """The `message` of the `Status` the API server answered with, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def read_or_none(call: Callable[[], Response]) -> Response | None:
    """`call()`, or None when the object does not exist (HTTP 404); other failures propagate."""
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
