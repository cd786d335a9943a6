"""Connecting to the Kubernetes API, for every Kubernetes edge of gputopo: the agent's publisher,
`kubectl gputopo` and the scheduler's client.

- Credentials, in kubectl's order: the kubeconfig file given (`--kubeconfig`); else the files
  `$KUBECONFIG` lists (`:`-separated, merged by the client); else the in-cluster service account;
  else `~/.kube/config`. `--context` skips the in-cluster step. The files are always named to the
  client explicitly (`kubeconfig_files`), so the file read is the file an error names: unusable
  credentials are one `ConfigError`, `no usable Kubernetes credentials (WHAT WAS TRIED): WHY`.
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

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from agent.errors import ConfigError
from agent.kube.kubeconfig import KubeconfigFiles, kubeconfig_files
from agent.kube.transport import TRANSPORT_ERRORS, transport_reason

__all__ = [
    "CREDENTIAL_ERRORS",
    "TRANSPORT_ERRORS",
    "KubeconfigFiles",
    "context_namespace",
    "kubeconfig_files",
    "load_api_client",
    "load_configuration",
    "read_or_none",
    "status_message",
    "transport_reason",
]

CREDENTIAL_ERRORS = (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError)
"""What the client raises for missing, unreadable or malformed credentials."""

Response = TypeVar("Response")


IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def context_namespace(
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    in_cluster_file: Path = IN_CLUSTER_NAMESPACE,
) -> str:
    """The namespace kubectl would use without `-n`: the kubeconfig context's (`--context`, else
    the current one), in a pod its ServiceAccount's, else `default`."""
    files = kubeconfig_files(kubeconfig, environ)
    if files.origin == "default" and not context and in_cluster_file.is_file():
        return in_cluster_file.read_text(encoding="utf-8").strip() or "default"
    if files.missing() is None:
        with contextlib.suppress(*CREDENTIAL_ERRORS):
            contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=os.pathsep.join(str(p) for p in files.paths)
            )
            chosen = next((c for c in contexts if c.get("name") == context), None)
            found = (chosen if context else current) or {}
            return str((found.get("context") or {}).get("namespace") or "default")
    return "default"


def load_configuration(
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> client.Configuration:
    """The client configuration, from the credentials the module docstring lists in order;
    ConfigError names every source tried and why the last one failed."""
    files = kubeconfig_files(kubeconfig, environ)
    tried = [f"{files}, context {context}" if context else str(files)]
    configuration = client.Configuration()
    configuration.retries = False  # one attempt per call: the caller retries (module docstring)
    if files.origin == "default" and not context:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return configuration
        except ConfigException as exc:
            tried.insert(0, _in_cluster_problem(exc))
    why = files.missing()
    if why is None:
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=os.pathsep.join(str(p) for p in files.paths),
                context=context,
                client_configuration=configuration,
            )
            return configuration
        except CREDENTIAL_ERRORS as exc:
            why = _file_problem(exc, context)
    raise ConfigError(f"no usable Kubernetes credentials ({'; '.join(tried)}): {why}")


def _file_problem(exc: BaseException, context: str | None) -> str:
    """The client's reason in one line; a context the files do not list, said plainly."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if context and f"Expected object with name {context} in" in text and "contexts list" in text:
        return f"no context {context} in it"
    return text


def _in_cluster_problem(exc: ConfigException) -> str:
    """`not in a pod` (no service host in the environment), else the client's reason."""
    if "host/port is not set" in str(exc):
        return "not in a pod"
    return f"in-cluster: {' '.join(str(exc).split())}"


def load_api_client(
    kubeconfig: str | Path | None = None, context: str | None = None
) -> client.ApiClient:
    """An API client from `load_configuration`; ConfigError says why there is none."""
    return client.ApiClient(load_configuration(kubeconfig, context))


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
