"""Host ports: which nodes a pod cannot go to because a pod there already takes a port it asks
for (kube-scheduler's `NodePorts` filter, with its message).

A pod's ports are those of its containers and sidecars (`PodRequest.host_ports`, read by the
runtime); two pods conflict on a node when one port overlaps (`HostPort.overlaps`: the same port
and protocol, on the same address or on every one). The snapshot keeps the ports its pods take
(`Snapshot.host_ports`), so a pod asking none costs nothing and one asking some a look at each
distinct port taken.

The `Placer` applies these refusals after the filters, with the inter-pod ones, so a node that
lacks room as well is counted under the room it lacks, where kube-scheduler, whose `NodePorts`
runs before `NodeResourcesFit`, counts the port.
"""

from __future__ import annotations

from .request import PodRequest
from .snapshot import Snapshot

__all__ = ["REASON_PORTS", "port_conflicts"]

REASON_PORTS = "node(s) didn't have free ports for the requested pod ports"


def port_conflicts(pod: PodRequest, snapshot: Snapshot) -> dict[str, str] | None:
    """Node name -> `REASON_PORTS` for the nodes where another pod takes a port `pod` asks
    for; None when there is none (or `pod` asks none)."""
    if not pod.host_ports:
        return None
    refused: dict[str, str] = {}
    for taken, holders in snapshot.host_ports.items():
        if any(port.overlaps(taken) for port in pod.host_ports):
            for key, node in holders.items():
                if key != pod.key:
                    refused[node] = REASON_PORTS
    return refused or None
