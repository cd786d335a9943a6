"""What each share container uses of one GPU (`PodShare`), as the agent counts it from its own
record of what it gave (DESIGN §12 "Trust"), and its wire form in the NRT GPU zone attribute
`sharePods`, which the scheduler charges after a restart instead of the pods' annotations.

Wire form: one entry per share container, `<namespace>/<name>/<container>:<pod UID>:<replicas>:
<bytes>:<percent>` (`-` for no compute limit; the UID empty where the agent does not know it),
joined by `,`. Kubernetes names and UIDs hold none of `/`, `:` or `,`, so the form needs no
escaping. The scheduler matches entries to pods by UID, since a pod's name is reused by the next
pod of a StatefulSet or a Job while the NRT may still name the last one.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PodShare", "ShareCodecError", "decode_share_pods", "encode_share_pods"]

NO_COMPUTE = "-"


class ShareCodecError(ValueError):
    """A malformed `sharePods` value; the message names the entry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodShare:
    """One container's share of a GPU: `replicas` of it, `memory_bytes`, `compute_percent`
    (None: no compute limit); `placed` False: a pod another scheduler placed (an equal split)."""

    pod: str  # namespace/name
    container: str
    memory_bytes: int
    uid: str = ""
    compute_percent: int | None = None
    replicas: int = 1
    placed: bool = True


def encode_share_pods(shares: Iterable[PodShare]) -> str:
    """The `sharePods` value of one GPU zone (entries sorted, so equal uses encode equally)."""
    return ",".join(
        sorted(
            f"{s.pod}/{s.container}:{s.uid}:{s.replicas}:{s.memory_bytes}:"
            f"{NO_COMPUTE if s.compute_percent is None else s.compute_percent}"
            for s in shares
        )
    )


def decode_share_pods(text: str) -> tuple[PodShare, ...]:
    """`encode_share_pods` reversed; ShareCodecError names a malformed entry."""
    out: list[PodShare] = []
    for entry in filter(None, text.split(",")):
        key, *numbers = entry.split(":")
        namespace, _, rest = key.partition("/")
        name, _, container = rest.partition("/")
        if len(numbers) != 4 or not (namespace and name and container):
            raise ShareCodecError(
                f"{entry!r}: expected <namespace>/<name>/<container>:UID:N:BYTES:PERCENT"
            )
        uid, replicas, memory, compute = numbers
        if not (replicas.isdigit() and memory.isdigit()) or not (
            compute == NO_COMPUTE or compute.isdigit()
        ):
            raise ShareCodecError(f"{entry!r}: replicas, bytes and percent must be numbers")
        out.append(
            PodShare(
                pod=f"{namespace}/{name}",
                container=container,
                uid=uid,
                replicas=int(replicas),
                memory_bytes=int(memory),
                compute_percent=None if compute == NO_COMPUTE else int(compute),
            )
        )
    return tuple(out)
