"""Which kubeconfig file(s) a command reads, in kubectl's order (`--kubeconfig`, `$KUBECONFIG`,
`~/.kube/config`), named explicitly so an error names the file read.

Light (standard library only): the scheduler chooses its credentials with it before the
`kubernetes` client is imported, if ever (`agent.kube.connect` has the whole order, in-cluster
included).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class KubeconfigFiles:
    """The kubeconfig file(s) to read and where that choice came from: `flag` (`--kubeconfig`),
    `env` (`$KUBECONFIG`, a list the client merges) or `default` (`~/.kube/config`)."""

    paths: tuple[Path, ...]
    origin: str

    def __str__(self) -> str:
        listed = os.pathsep.join(str(p) for p in self.paths)
        return f"kubeconfig {listed}" + (" from $KUBECONFIG" if self.origin == "env" else "")

    def missing(self) -> str | None:
        """Why none of the files can be read (None while one exists)."""
        if any(p.is_file() for p in self.paths):
            return None
        return "no such file" if len(self.paths) == 1 else "none of these files exists"


def kubeconfig_files(
    kubeconfig: str | Path | None, environ: Mapping[str, str] | None = None
) -> KubeconfigFiles:
    """`kubeconfig` when given, else what `$KUBECONFIG` (in `environ`) lists, else the default."""
    if kubeconfig:
        return KubeconfigFiles((Path(kubeconfig),), "flag")
    variables = os.environ if environ is None else environ
    listed = [p for p in variables.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return KubeconfigFiles(tuple(Path(p).expanduser() for p in listed), "env")
    return KubeconfigFiles((Path("~/.kube/config").expanduser(),), "default")
