"""The test cluster's certificates (a private CA, by openssl) and kubeconfigs. Stdlib only.

Identities are the ones a real cluster's components have, so RBAC and the Node authorizer treat
them as they would there: the admin (`system:masters`), `system:kube-controller-manager`,
`system:kube-scheduler`, the node `system:node:<name>` (group `system:nodes`), the API server's
kubelet client, and `tenant` (no group: a user whose rights the tests grant with RBAC).
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

# (file name, subject, extended key usage, subject alternative names)
CLIENTS = (
    ("admin", "/O=system:masters/CN=gputopo-admin"),
    ("kube-controller-manager", "/CN=system:kube-controller-manager"),
    ("kube-scheduler", "/CN=system:kube-scheduler"),
    ("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client"),
    ("tenant", "/CN=tenant"),
)
APISERVER_SANS = (
    "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
    "DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
)


@dataclass(frozen=True)
class Certs:
    folder: Path

    @property
    def ca_crt(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.folder / "sa.pub"

    def crt(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _leaf(certs: Certs, name: str, subject: str, usage: str, sans: str | None) -> None:
    ext = certs.folder / f"{name}.ext"
    lines = [
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if sans:
        lines.append(f"subjectAltName={sans}")
    ext.write_text("\n".join(lines) + "\n")
    csr = certs.folder / f"{name}.csr"
    key, crt = str(certs.key(name)), str(certs.crt(name))
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", key, "-out", str(csr), "-subj", subject)  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(certs.ca_crt), "-CAkey",
             str(certs.ca_key), "-CAcreateserial", "-days", "30", "-out", crt,
             "-extfile", str(ext))  # fmt: skip


def make_all(run: Path, node: str) -> Certs:
    certs = Certs(run / "pki")
    certs.folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(certs.ca_key), "-out", str(certs.ca_crt), "-days", "30",
             "-subj", "/CN=gputopo-test-ca")  # fmt: skip
    _openssl("genrsa", "-out", str(certs.sa_key), "2048")
    _openssl("rsa", "-in", str(certs.sa_key), "-pubout", "-out", str(certs.sa_pub))
    _leaf(certs, "apiserver", "/CN=kube-apiserver", "serverAuth", APISERVER_SANS)
    for name, subject in CLIENTS:
        _leaf(certs, name, subject, "clientAuth", None)
    _leaf(certs, f"node-{node}", f"/O=system:nodes/CN=system:node:{node}", "clientAuth", None)
    _leaf(certs, f"kubelet-serving-{node}", f"/CN={node}", "serverAuth",
          f"DNS:{node},DNS:localhost,IP:127.0.0.1")  # fmt: skip
    return certs


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(certs: Certs, server: str, user: str, cert_name: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: gputopo-test\n  cluster:\n    server: {server}\n"
        f"    certificate-authority-data: {_b64(certs.ca_crt)}\n"
        f"users:\n- name: {user}\n  user:\n"
        f"    client-certificate-data: {_b64(certs.crt(cert_name))}\n"
        f"    client-key-data: {_b64(certs.key(cert_name))}\n"
        f"contexts:\n- name: {user}\n  context:\n    cluster: gputopo-test\n    user: {user}\n"
        f"current-context: {user}\n"
    )


def write_kubeconfigs(run: Path, certs: Certs, server: str, node: str) -> None:
    for name, _ in CLIENTS:
        (run / f"{name}.kubeconfig").write_text(kubeconfig(certs, server, name, name))
    (run / f"kubelet-{node}.kubeconfig").write_text(
        kubeconfig(certs, server, f"system:node:{node}", f"node-{node}")
    )
