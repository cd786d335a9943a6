"""The scheduler's connection to the API server: where it is, a urllib3 pool that speaks its TLS,
and the credentials each request carries.

Importing the `kubernetes` client (its models, its kubeconfig loader, `kubernetes.utils`) took
more than a second of the scheduler's start, before its first list. The credentials almost every
cluster gives a scheduler need none of it, so `connect` reads them here, in kubectl's order
(`agent.kube.kubeconfig`: `--kubeconfig`, `$KUBECONFIG`, in a pod its ServiceAccount, else
`~/.kube/config`):

- in a pod: `KUBERNETES_SERVICE_HOST`/`_PORT`, the ServiceAccount's CA and token; the token file
  is read again once a minute (a projected token is rotated by the kubelet), as client-go does;
- one kubeconfig file whose current context's cluster has `server` and a CA (file or data) or
  `insecure-skip-tls-verify`, and whose user has a bearer token (`token`, `tokenFile`) and/or a
  client certificate and key (files or data), or nothing.

Anything else (several `$KUBECONFIG` files to merge, `exec` and `auth-provider` plugins, basic
auth, impersonation, proxies, a `tls-server-name`) is left to the `kubernetes` client
(`agent.kube.connect.load_configuration`, imported only then), and its `ApiClient` gives the
pool and headers (`Connection.of_api_client`): every feature of the library stays available, the
common case starts a second sooner.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3
import yaml

from agent.errors import ConfigError
from agent.kube.kubeconfig import KubeconfigFiles, kubeconfig_files

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
_USER_KEYS = frozenset(
    {
        "token",
        "tokenFile",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
    }
)
_CLUSTER_KEYS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify"}
)


class _TokenFile:
    """A bearer token read from a file, again when the last read is a minute old."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self._clock = path, clock
        self._lock = threading.Lock()
        self._token, self._read_at = self._read(), clock()

    def _read(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"token file {self.path}: {exc.strerror or exc}") from exc

    def current(self) -> str:
        with self._lock:
            if self._clock() - self._read_at >= TOKEN_REREAD_SECONDS:
                try:
                    self._token = self._read()
                finally:
                    self._read_at = self._clock()
            return self._token


@dataclass
class Connection:
    """Where the API server is (`host`: scheme, host and port), the pool that reaches it, and
    `auth()`: the headers that carry the credentials, read per request."""

    host: str
    pool: urllib3.PoolManager
    auth: Callable[[], Mapping[str, str]]
    source: str
    """What the credentials came from, for logs and errors."""
    _on_close: Callable[[], None] = field(default=lambda: None, repr=False)

    def close(self) -> None:
        self.pool.clear()
        self._on_close()

    @classmethod
    def of_api_client(cls, api_client: ApiClient, source: str = "kubernetes client") -> Connection:
        """The pool, host and credentials of a `kubernetes` `ApiClient` (its default headers,
        cookie and header-borne auth settings, read per request so a refreshed token is used)."""
        any_client: Any = api_client

        def auth() -> dict[str, str]:
            headers = dict(any_client.default_headers)
            if any_client.cookie:
                headers["Cookie"] = any_client.cookie
            for setting in any_client.configuration.auth_settings().values():
                if setting.get("in") == "header" and setting.get("value"):
                    headers[setting["key"]] = setting["value"]
            return headers

        return cls(
            host=str(any_client.configuration.host),
            pool=any_client.rest_client.pool_manager,
            auth=auth,
            source=source,
            _on_close=any_client.close,
        )


def connect(
    kubeconfig: str | None,
    pool_size: int,
    environ: Mapping[str, str] | None = None,
    service_account: Path = SERVICE_ACCOUNT,
) -> Connection:
    """The connection the credentials give (module docstring); ConfigError says why none."""
    variables = os.environ if environ is None else environ
    files = kubeconfig_files(kubeconfig, variables)
    if files.origin == "default" and variables.get("KUBERNETES_SERVICE_HOST"):
        direct = _in_cluster(variables, service_account, pool_size)
    else:
        direct = _from_file(files, pool_size)
    return direct if direct is not None else _through_client(kubeconfig, variables, pool_size)


def _through_client(
    kubeconfig: str | None, environ: Mapping[str, str], pool_size: int
) -> Connection:
    from kubernetes.client import ApiClient

    from agent.kube.connect import load_configuration

    configuration = load_configuration(kubeconfig, environ=environ)
    configuration.connection_pool_maxsize = pool_size
    return Connection.of_api_client(ApiClient(configuration))


def _in_cluster(
    environ: Mapping[str, str], service_account: Path, pool_size: int
) -> Connection | None:
    """The pod's ServiceAccount; None (the client decides and explains) when a part is missing."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT")
    token, ca = service_account / "token", service_account / "ca.crt"
    if not port or not token.is_file() or not ca.is_file():
        return None
    source = f"in-cluster ServiceAccount ({service_account})"
    try:
        context = ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{source}: {ca}: {exc}") from exc
    bearer = _TokenFile(token)
    netloc = f"[{host}]" if ":" in host else host
    return Connection(
        host=f"https://{netloc}:{port}",
        pool=_pool(context, pool_size),
        auth=lambda: {"Authorization": f"Bearer {bearer.current()}"},
        source=source,
    )


def _from_file(files: KubeconfigFiles, pool_size: int) -> Connection | None:
    """One kubeconfig file in the shape the module docstring lists; None for anything else."""
    if len(files.paths) != 1 or files.missing() is not None:
        return None
    path = files.paths[0]
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None  # the client reads it again and says why
    chosen = _current(document)
    if chosen is None:
        return None
    cluster, user = chosen
    if not set(cluster) <= _CLUSTER_KEYS or not set(user) <= _USER_KEYS:
        return None
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        return None
    base = path.parent
    try:
        context = _tls(cluster, user, base) if server.startswith("https://") else None
        auth = _bearer(user, base)
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise ConfigError(f"kubeconfig {path}: {exc}") from exc
    return Connection(
        host=server.rstrip("/"),
        pool=_pool(context, pool_size),
        auth=auth,
        source=f"kubeconfig {path}",
    )


def _current(document: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The current context's cluster and user entries, or None when the file does not say."""
    if not isinstance(document, dict):
        return None
    name = document.get("current-context")
    context = _named(document.get("contexts"), name, "context")
    if context is None:
        return None
    cluster = _named(document.get("clusters"), context.get("cluster"), "cluster")
    user = _named(document.get("users"), context.get("user"), "user") or {}
    if cluster is None or set(context) - {"cluster", "user", "namespace"}:
        return None
    return cluster, user


def _named(entries: Any, name: Any, key: str) -> dict[str, Any] | None:
    if not name or not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(key)
            return body if isinstance(body, dict) else None
    return None


def _tls(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> ssl.SSLContext:
    """The TLS the kubeconfig asks for: its CA (or no check at all), its client certificate."""
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        pem = base64.b64decode(str(cluster["certificate-authority-data"])).decode()
        context = ssl.create_default_context(cadata=pem)
    elif cluster.get("certificate-authority"):
        context = ssl.create_default_context(cafile=str(base / cluster["certificate-authority"]))
    else:
        context = ssl.create_default_context()
    cert = _pem(user, "client-certificate", base)
    key = _pem(user, "client-key", base)
    if cert is not None and key is not None:
        _load_chain(context, cert, key)
    elif cert is not None or key is not None:
        raise ValueError("a client certificate needs its key, and a key its certificate")
    return context


def _pem(user: Mapping[str, Any], name: str, base: Path) -> bytes | None:
    if user.get(f"{name}-data"):
        return base64.b64decode(str(user[f"{name}-data"]))
    if user.get(name):
        return (base / str(user[name])).read_bytes()
    return None


def _load_chain(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """`load_cert_chain` reads files only: the PEMs go through a private folder, removed at once
    (the context keeps them in memory)."""
    with tempfile.TemporaryDirectory(prefix="gputopo-tls-") as folder:
        cert_file, key_file = Path(folder, "cert.pem"), Path(folder, "key.pem")
        for target, data in ((cert_file, cert), (key_file, key)):
            descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
        context.load_cert_chain(str(cert_file), str(key_file))


def _bearer(user: Mapping[str, Any], base: Path) -> Callable[[], Mapping[str, str]]:
    if user.get("token"):
        header = {"Authorization": f"Bearer {user['token']}"}
        return lambda: header
    if user.get("tokenFile"):
        bearer = _TokenFile(base / str(user["tokenFile"]))
        return lambda: {"Authorization": f"Bearer {bearer.current()}"}
    return dict


def _pool(context: ssl.SSLContext | None, pool_size: int) -> urllib3.PoolManager:
    """No retries inside the pool (`agent.kube.connect`'s reasons): every caller retries."""
    if context is None:
        return urllib3.PoolManager(num_pools=4, maxsize=pool_size, retries=False)
    return urllib3.PoolManager(num_pools=4, maxsize=pool_size, retries=False, ssl_context=context)
