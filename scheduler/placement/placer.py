"""The decision API: a `Placer` decides every pod placed on one snapshot with one scoring.

The runtime loop, gang placement, the simulator and the benchmarks all decide through
`Placer.decide` (or `best_assignment` when no reasons are wanted; the simulator's random policy
asks `feasible` and `assignment_on`) and never choose how. The decisions are `pick`'s: the same
node, devices and score, and the same reasons when nothing fits. How they are made is the
Placer's own business:

- with `scoring.candidate_limit == 0` (every feasible node ranked; the shipped default) through
  the `verdict_memo`, which keeps each node's verdict per pod class until the snapshot says the
  node changed;
- for a pod that inter-pod rules refuse some nodes (`interpod.refused_nodes`), or that asks for
  a host port taken on some (`hostports.port_conflicts`), through the memo with those nodes left
  out as held ones are (and, when nothing fits, `pick`'s reasons counted with the rules' or the
  ports' reason on those nodes);
- for a pod whose preferences rank nodes (inter-pod ones, `interpod.preference_bonus`; preferred
  node affinity and `PreferNoSchedule` taints, `nodeprefs.node_preference_bonus`), through the
  memo group by group when the bonus takes few values, else through `pick` with that bonus
  added to each node's score (the memo keeps no per-pod term);
- with a candidate limit through `pick` itself (the first feasible nodes in the snapshot's
  order decide, which a memo cannot reproduce), keeping each node's verdict for pods of one
  shape in a row (`VerdictCache`: a gang's members).

The snapshot may change in any way between calls (assume, forget, nodes added, replaced or
removed); the Placer sees it through the snapshot's change tracking. Not thread-safe: the caller
serialises access (the scheduler holds its cache lock).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextlib import contextmanager

from .filters import filter_node
from .hostports import port_conflicts
from .interpod import ReadMemo, preference_bonus, refused_nodes
from .node import Assignment
from .nodeprefs import node_preference_bonus
from .pick import Decision, VerdictCache, pick
from .request import PodRequest
from .scores import Scoring
from .snapshot import Snapshot
from .verdict_memo import VerdictMemo

__all__ = ["Placer"]


class Placer:
    """Decides pods on `snapshot` with `scoring`, exactly as `pick` does. `memo` False: always
    through `pick`, for a snapshot that lives for a few decisions (the victim search's what-if
    areas): building the memo's per-node records costs more than it saves there. `inter_pod`
    False: inter-pod rules neither refuse nor rank a node, as the caller judges them (a what-if
    area of a few nodes, whose rules read domains beyond them)."""

    def __init__(
        self, snapshot: Snapshot, scoring: Scoring, *, memo: bool = True, inter_pod: bool = True
    ) -> None:
        self._snapshot = snapshot
        self._scoring = scoring
        self._inter_pod = inter_pod
        self._node_prefs: tuple[Hashable, dict[str, float] | None] | None = None
        self._read: tuple[int, PodRequest, ReadMemo] | None = None
        self._memo = (
            VerdictMemo(snapshot, scoring) if memo and scoring.candidate_limit == 0 else None
        )
        self._cache = VerdictCache(snapshot)  # `pick`'s (a candidate limit, or preferences)

    @property
    def snapshot(self) -> Snapshot:
        """The live snapshot decided on (changed by the caller, never by the Placer)."""
        return self._snapshot

    @property
    def scoring(self) -> Scoring:
        return self._scoring

    def decide(
        self,
        pod: PodRequest,
        *,
        allowed: AbstractSet[str] | None = None,
        explain: bool = True,
        excluded: AbstractSet[str] | None = None,
    ) -> Decision:
        """The best node for `pod` among `allowed` (default: all nodes) but `excluded` (nodes
        held for other pods: `Nominations.blocked`); the snapshot is unchanged.

        When nothing fits, `reasons` counts every node's reason with `explain`, else only the
        candidates' (cheaper); when a node is found they may be left out. Learning scores see
        the pod first, whether or not it fits.
        """
        refused = self._refused(pod)
        bonus = self._bonus(pod)
        memo = self._memo
        if memo is not None and bonus is not None and self._few(bonus):
            found = self._with_few_bonuses(pod, memo, bonus, (allowed, excluded, refused))
            if found is not None:
                return found
            bonus = None  # nothing fits: the reasons are those of the pod without preferences
        if bonus is not None:
            memo = None
        if memo is None:
            return self._pick(pod, (allowed, excluded, refused), bonus, explain=explain)
        if refused is None:
            return memo.decide(pod, allowed=allowed, explain=explain, excluded=excluded)
        # the memo ranks the nodes the rules leave as `pick` does; only the reasons are `pick`'s
        off = _without(excluded, refused)
        found = memo.decide(pod, allowed=allowed, explain=False, excluded=off)
        if found.assignment is not None:
            return found
        reasons = memo.reasons(
            pod, allowed=allowed, explain=explain, excluded=excluded, refused=refused
        )
        return Decision(
            pod=pod.key, assignment=None, reasons=reasons, nodes_total=len(self._snapshot)
        )

    def best_assignment(
        self,
        pod: PodRequest,
        *,
        allowed: AbstractSet[str] | None = None,
        excluded: AbstractSet[str] | None = None,
    ) -> Assignment | None:
        """`decide(pod, allowed=allowed, excluded=excluded).assignment`, without the reasons
        `decide` counts when nothing fits (the simulator asks this of every pod it offers, and
        most of those offers fit nowhere: a queue waits)."""
        refused = self._refused(pod)
        bonus = self._bonus(pod)
        memo = self._memo
        if memo is not None and bonus is not None and self._few(bonus):
            found = self._with_few_bonuses(pod, memo, bonus, (allowed, excluded, refused))
            return None if found is None else found.assignment
        if bonus is not None:
            memo = None
        if memo is None:  # `pick` counts only the candidates' reasons without `explain`
            return self._pick(pod, (allowed, excluded, refused), bonus, explain=False).assignment
        off = excluded if refused is None else _without(excluded, refused)
        return memo.best(pod, allowed=allowed, excluded=off)

    def _pick(
        self,
        pod: PodRequest,
        where: tuple[AbstractSet[str] | None, AbstractSet[str] | None, Mapping[str, str] | None],
        bonus: Mapping[str, float] | None,
        *,
        explain: bool,
    ) -> Decision:
        """`pick` on this snapshot and scoring with the kept verdicts; `where`: (allowed,
        excluded, refused) nodes."""
        allowed, excluded, refused = where
        return pick(
            pod,
            self._snapshot,
            self._scoring,
            allowed=allowed,
            explain=explain,
            cache=self._cache,
            excluded=excluded,
            refused=refused,
            bonus=bonus,
        )

    def read_memo(self, pod: PodRequest) -> ReadMemo:
        """What `pod`'s inter-pod rules read of the snapshot (`interpod.ReadMemo`), kept for the
        last pod asked about while the snapshot's generation stands: a pod's placement and the
        victim search for it in the same cycle read the rules' pods once."""
        generation = self._snapshot.generation
        kept = self._read
        if kept is not None and kept[0] == generation and (kept[1] is pod or kept[1] == pod):
            return kept[2]
        memo = ReadMemo()
        self._read = (generation, pod, memo)
        return memo

    @contextmanager
    def trial(self) -> Iterator[None]:
        """Around changes to the snapshot that the caller undoes, every one, before the block
        ends (a gang's members assumed while the next is placed): what the memo knew of the
        snapshot before the block holds after it (`best_assignment`'s refusals,
        `refusals.Refusals`). Changes not undone make its decisions wrong."""
        memo = self._memo
        if memo is None:
            yield
            return
        before = self._snapshot.generation
        memo.trial_begins()
        yield
        memo.trial_undone(before)

    def feasible(self, pod: PodRequest) -> tuple[str, ...]:
        """Names of the nodes where `pod` fits (as `filter_node` and the inter-pod rules say),
        sorted; with the memo, the same tuple while the answer is unchanged."""
        refused = self._refused(pod) or {}
        if self._memo is not None:
            names = self._memo.feasible(pod)
        else:
            self._scoring.observe(pod, self._snapshot)
            nodes = self._snapshot.nodes
            names = tuple(
                name
                for name in self._snapshot.names()
                if filter_node(pod, nodes[name]).assignment is not None
            )
        return tuple(name for name in names if name not in refused) if refused else names

    def assignment_on(self, pod: PodRequest, node_name: str) -> Assignment | None:
        """The devices `pod` gets on `node_name` (None if it does not fit there)."""
        if self._memo is not None:
            found = self._memo.assignment_on(pod, node_name)
        else:
            self._scoring.observe(pod, self._snapshot)
            found = filter_node(pod, self._snapshot.node(node_name)).assignment
        if found is not None and node_name in (self._refused(pod) or {}):
            return None
        return found

    def _few(self, bonus: Mapping[str, float]) -> bool:
        """Whether `bonus` takes few values (one per group of nodes the memo ranks together; a
        bonus from hostname terms takes one or two, from zones one per zone), and the scoring
        ranks by the score alone (no used-node tier)."""
        if self._scoring.prefer_used_nodes:
            return False
        values: set[float] = set()
        for value in bonus.values():
            values.add(value)
            if len(values) > _FEW_BONUSES:
                return False
        return True

    def _with_few_bonuses(
        self,
        pod: PodRequest,
        memo: VerdictMemo,
        bonus: Mapping[str, float],
        where: tuple[AbstractSet[str] | None, AbstractSet[str] | None, Mapping[str, str] | None],
    ) -> Decision | None:
        """`pick(..., bonus=bonus)`'s decision where a node fits (None where none does): the
        memo's best node of each group of nodes that share a bonus (those `bonus` does not name:
        0), by score and bonus, the lowest name on ties."""
        allowed, excluded, refused = where
        groups: dict[float, set[str]] = {}
        for name, value in bonus.items():
            groups.setdefault(value, set()).add(name)
        off: AbstractSet[str] = bonus.keys()
        if refused:
            off = off | refused.keys()
        if excluded:
            off = off | excluded
        held: AbstractSet[str] = frozenset()
        if refused:
            held = refused.keys()
        if excluded:
            held = held | excluded
        values = [0.0, *groups]
        found = memo.best_by_group(
            pod, [None, *groups.values()], allowed=allowed, excluded=off, held=held or None
        )
        best: tuple[float, str, Assignment] | None = None
        for extra, placed in zip(values, found, strict=True):
            if placed is None:
                continue
            assignment, score = placed
            total = score + extra
            if best is None or total > best[0] or (total == best[0] and assignment.node < best[1]):
                best = (total, assignment.node, assignment)
        if best is None:
            return None
        return Decision(
            pod=pod.key, assignment=best[2], score=best[0], nodes_total=len(self._snapshot)
        )

    def _bonus(self, pod: PodRequest) -> dict[str, float] | None:
        """What preferences add to each node's score (None: none weighs, or they rank every
        node alike): the inter-pod ones (the pod's, and the running pods' that select it) and
        the node ones (preferred node affinity, `PreferNoSchedule` taints)."""
        nodes = self._node_bonus(pod)
        if pod.preferences is None and not self._snapshot.weighed_terms:
            return nodes  # no inter-pod preference: the common case, kept to three reads
        pods = preference_bonus(pod, self._snapshot) if self._inter_pod else None
        if not pods or not nodes:
            return pods or nodes
        merged = dict(pods)
        for name, value in nodes.items():
            merged[name] = merged.get(name, 0.0) + value
        return merged

    def _node_bonus(self, pod: PodRequest) -> dict[str, float] | None:
        """`nodeprefs.node_preference_bonus`, kept while the nodes and the pod's preferred terms
        and tolerations stay (a Deployment's replicas in a row cost one pass over the nodes)."""
        if not pod.preferred_affinity and not self._snapshot.soft_tainted:
            return None
        key = (pod.preferred_affinity, pod.tolerations, self._snapshot.nodes_version)
        if self._node_prefs is None or self._node_prefs[0] != key:
            self._node_prefs = (key, node_preference_bonus(pod, self._snapshot))
        return self._node_prefs[1]

    def _refused(self, pod: PodRequest) -> dict[str, str] | None:
        """The nodes a port `pod` asks for is taken on (`hostports.port_conflicts`) or its
        inter-pod rules refuse it (`interpod.refused_nodes`), with the first reason in the
        stock filters' order; None: none."""
        ports = port_conflicts(pod, self._snapshot) if pod.host_ports else None
        if pod.inter_pod is None and not self._snapshot.anti_affinity_terms:
            return ports  # no rule reads the pod: the common case, kept to three reads
        rules = (
            refused_nodes(pod, self._snapshot, memo=self.read_memo(pod))
            if self._inter_pod
            else None
        )
        if rules is None or ports is None:
            return ports or rules
        return rules | ports


_FEW_BONUSES = 16
"""The most distinct bonus values the memo ranks group by group (else `pick` ranks every node)."""


def _without(excluded: AbstractSet[str] | None, refused: Mapping[str, str]) -> AbstractSet[str]:
    """The nodes held (`excluded`) and those the inter-pod rules refuse, together."""
    return refused.keys() | excluded if excluded else refused.keys()
