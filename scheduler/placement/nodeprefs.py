"""Node preferences: what a pod's preferred node affinity and the nodes' `PreferNoSchedule`
taints add to a node's score, as kube-scheduler's `NodeAffinity` and `TaintToleration` scores
rank nodes.

- Preferred node affinity: each term a node matches adds the term's weight; the nodes with the
  highest sum gain `PREFERENCE_POINTS` over the nodes matching none, the others in proportion
  (the stock score normalises the sums to 0-100 by the highest).
- `PreferNoSchedule` taints: each one of a node that the pod does not tolerate counts; the nodes
  with the most lose `PREFERENCE_POINTS` against those with none, the others in proportion (the
  stock score's reverse normalisation).

Each part is as large as an inter-pod preference (`interpod.PREFERENCE_POINTS`): a preference
decides unless packing differs by as much. The bonus is given relative to its most common value,
which is left out, so a preference most nodes meet names only the nodes that do not.
"""

from __future__ import annotations

from collections import Counter

from .interpod import PREFERENCE_POINTS
from .request import Effect, PodRequest
from .snapshot import Snapshot

__all__ = ["node_preference_bonus"]


def node_preference_bonus(pod: PodRequest, snapshot: Snapshot) -> dict[str, float] | None:
    """Node name -> what `pod`'s preferred node affinity and the nodes' `PreferNoSchedule`
    taints add to its score there, less an amount the same on every node (a node not named:
    0); None when neither ranks one node above another. Costs a pass over the nodes when the
    pod prefers some, else one over the tainted nodes."""
    raw: dict[str, float] = {}
    terms = pod.preferred_affinity
    if terms:
        sums: dict[str, int] = {}
        for name, node in snapshot.nodes.items():
            total = sum(t.weight for t in terms if t.matches(name, node.labels))
            if total:
                sums[name] = total
        highest = max(sums.values(), default=0)
        for name, total in sums.items():
            raw[name] = PREFERENCE_POINTS * total / highest
    untolerated: dict[str, int] = {}
    for name in snapshot.soft_tainted:
        count = sum(
            1
            for taint in snapshot.node(name).taints
            if taint.effect is Effect.PREFER_NO_SCHEDULE
            and not any(t.tolerates(taint) for t in pod.tolerations)
        )
        if count:
            untolerated[name] = count
    most = max(untolerated.values(), default=0)
    for name, count in untolerated.items():
        raw[name] = raw.get(name, 0.0) - PREFERENCE_POINTS * count / most
    return _relative(raw, snapshot)


def _relative(raw: dict[str, float], snapshot: Snapshot) -> dict[str, float] | None:
    """`raw` (a node not named: 0) less its most common value, the nodes left at 0 dropped;
    None when every node is alike."""
    counts = Counter(raw.values())
    unnamed = len(snapshot) - len(raw)
    if unnamed:
        counts[0.0] += unnamed
    if len(counts) <= 1:
        return None
    base = counts.most_common(1)[0][0]
    shifted = {name: value - base for name, value in raw.items() if value != base}
    if base and unnamed:
        shifted.update((name, -base) for name in snapshot.nodes if name not in raw)
    return shifted
