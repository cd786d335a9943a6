"""Inter-pod rules for placement and victim-search tests: label selectors, pod terms, spread
constraints, and nodes labelled with their hostname and zone."""

from __future__ import annotations

from typing import Any

from scheduler.placement import PodRequest, Snapshot
from scheduler.placement.interpod import HOSTNAME
from scheduler.placement.request import (
    InterPodRules,
    LabelSelector,
    NodeSelectorRequirement,
    Operator,
    PodTerm,
    SpreadConstraint,
)
from tests.builders.placement import make_node, pod

HOST = HOSTNAME
ZONE = "topology.kubernetes.io/zone"


def selector(**labels: str) -> LabelSelector:
    return LabelSelector(
        requirements=tuple(
            NodeSelectorRequirement(key=k, operator=Operator.IN, values=(v,))
            for k, v in labels.items()
        )
    )


def term(key: str = HOST, *, every_namespace: bool = False, **labels: str) -> PodTerm:
    """A term over `key` selecting `labels` in namespace `default` (or every namespace)."""
    return PodTerm(
        selector=selector(**labels),
        namespaces=None if every_namespace else frozenset({"default"}),
        topology_key=key,
    )


def labelled(
    key: str,
    *,
    ns: str = "default",
    rules: InterPodRules | None = None,
    gpus: int = 1,
    **labels: str,
) -> PodRequest:
    return pod(f"{ns}/{key}", namespace=ns, labels=labels, inter_pod=rules, gpus=gpus)


def zoned(*zones: str) -> Snapshot:
    """One 8-GPU node per entry, named n0.., labelled with its hostname and that zone."""
    return Snapshot(
        make_node(f"n{i}", labels={HOST: f"n{i}", ZONE: zone}) for i, zone in enumerate(zones)
    )


def put(snap: Snapshot, node: str, request: PodRequest) -> None:
    assignment = snap.assume_on(request, node)
    assert assignment.node == node


def spread(key: str = ZONE, skew: int = 1, **kwargs: object) -> InterPodRules:
    constraint = SpreadConstraint(
        max_skew=skew,
        topology_key=key,
        selector=selector(app="web"),
        **kwargs,  # type: ignore[arg-type]
    )
    return InterPodRules(spread=(constraint,))


def exclusive_affinity(job: str, key: str) -> dict[str, Any]:
    """A pod's `spec.affinity` as JobSet writes it for exclusive placement over `key`: required
    affinity to its own job's pods, anti-affinity to every other job's."""
    mine = {"labelSelector": {"matchLabels": {"job": job}}, "topologyKey": key}
    others = {
        "labelSelector": {
            "matchExpressions": [
                {"key": "job", "operator": "Exists"},
                {"key": "job", "operator": "NotIn", "values": [job]},
            ]
        },
        "topologyKey": key,
    }
    return {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [mine]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [others]},
    }
