"""The policies the simulator compares, and `SimScheduler`, which places pods with one of them.

* `gputopo` (alias `default`): the scheduler's own scoring, exactly as
  `scheduler/default-config.yaml` ships it ("default" as in gputopo's defaults, not the stock
  default-scheduler, which is `spread` here);
* `bestfit`, `fgd`, `random`: the baselines of the FGD paper (Weng et al., ATC '23) as its
  simulator runs them: one score plugin, every feasible node ranked, ties to the lowest node name;
  FGD puts a GPU share on the GPU its score prefers, `random` on a random GPU that fits;
* `spread`: LeastAllocated over cpu, memory and GPU (the emptiest node wins).

All of them run the real placement code: their `Scoring` through the cluster's `Placer`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from scheduler.claims.model import ResourceClaim
from scheduler.config import SchedulerConfig, load_config
from scheduler.placement import (
    CLIQUE_LABEL,
    Assignment,
    GangPlacement,
    NodeState,
    PodRequest,
    Scoring,
    TopologyConstraint,
    WeightedScore,
    excluding_outside,
    place_gang,
)
from scheduler.placement.fgd import FgdScore, Fragmentation, TypicalPod
from scheduler.placement.fragscores import bestfit_score, least_allocated_score
from scheduler.placement.shares import legacy_share
from scheduler.sim.claims import ClaimFit, SimClaims
from scheduler.sim.cluster import Cluster

__all__ = ["ALIASES", "POLICIES", "SimPolicy", "SimScheduler", "canonical_policy", "make_policy"]

POLICIES = ("gputopo", "spread", "bestfit", "random", "fgd")
ALIASES = {"default": "gputopo"}  # the name before 0.2; still accepted


def canonical_policy(name: str) -> str:
    """`name` as results report it (an alias becomes its policy; anything else is unchanged)."""
    return ALIASES.get(name, name)


ShareChooser = Callable[[PodRequest, NodeState, random.Random], int | None]


@dataclass(frozen=True, slots=True)
class SimPolicy:
    """A `Scoring`, plus how the paper's baselines differ from the scheduler's decision (uniform
    node, share GPU)."""

    name: str
    scoring: Scoring
    uniform: bool = False
    share_gpu: ShareChooser | None = None
    prefer_clique: bool = False  # gangs prefer one NVLink clique (the scheduler's, DESIGN §13)


def _single(name: str, fn: Callable[[PodRequest, NodeState, Assignment], float]) -> Scoring:
    return Scoring(
        scores=(WeightedScore(name, 1.0, fn),), prefer_used_nodes=False, candidate_limit=0
    )


def _anywhere(gpu: int) -> bool:
    del gpu
    return True


def _random_share(pod: PodRequest, node: NodeState, rng: random.Random) -> int | None:
    fits = [g for g, f in enumerate(node.gpu_free) if not node.gpu_mig[g] and f >= pod.gpu_milli]
    return rng.choice(fits) if fits else None


def make_policy(
    name: str, typical: Sequence[TypicalPod], config: SchedulerConfig | None = None
) -> SimPolicy:
    """The policy called `name` (one of `POLICIES` or `ALIASES`); `typical` feeds the
    fragmentation scores."""
    name = canonical_policy(name)
    if name == "gputopo":
        config = config or load_config(None)
        return SimPolicy(
            name, config.scoring(), prefer_clique=CLIQUE_LABEL in config.topology_levels
        )
    if name == "spread":
        return SimPolicy(name, _single("leastAllocated", least_allocated_score))
    if name == "bestfit":
        return SimPolicy(name, _single("bestfit", bestfit_score))
    if name == "random":
        empty = Scoring(scores=(), prefer_used_nodes=False, candidate_limit=0)
        return SimPolicy(name, empty, uniform=True, share_gpu=_random_share)
    if name == "fgd":
        fgd = FgdScore(Fragmentation(typical))
        return SimPolicy(
            name, _single("fgd", fgd), share_gpu=lambda pod, node, _rng: fgd.share_gpu(pod, node)
        )
    raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")


class SimScheduler:
    """Places pods on `cluster` with `policy`; `rng` draws the random policy's choices."""

    def __init__(self, cluster: Cluster, policy: SimPolicy, rng: random.Random) -> None:
        self.cluster = cluster
        self.policy = policy
        self.rng = rng
        self.placer = cluster.placer(policy.scoring)
        self.claims: dict[str, tuple[ResourceClaim, ...]] = {}
        """The claims of claim-style pods by pod key (`SimClaims` places them)."""
        self._sim_claims: SimClaims | None = None

    def choose(
        self,
        pod: PodRequest,
        excluded: AbstractSet[str] | None = None,
        allowed: frozenset[str] | None = None,
    ) -> Assignment | None:
        """Where `pod` would go, never on `excluded` (nodes held for others) and only on `allowed`
        (None: any node); nothing is bound."""
        claims = self.claims.get(pod.key)
        if claims:
            off = excluding_outside(self.cluster.snapshot, excluded, allowed)
            return self._claims_placer().choose(pod, claims, off)
        if self.policy.uniform:
            names: Sequence[str] = self.placer.feasible(pod)
            if excluded or allowed is not None:
                names = [
                    n
                    for n in names
                    if not (excluded and n in excluded) and (allowed is None or n in allowed)
                ]
            if not names:
                return None
            assignment = self.placer.assignment_on(pod, self.rng.choice(names))
        else:
            assignment = self.placer.best_assignment(pod, allowed=allowed, excluded=excluded)
        if assignment is None or not pod.gpu_milli or self.policy.share_gpu is None:
            return assignment
        node = self.cluster.snapshot.node(assignment.node)
        gpu = self.policy.share_gpu(pod, node, self.rng)
        share = None if gpu is None else legacy_share(node, pod.gpu_milli, _anywhere, (gpu,))
        if share is None:
            return assignment
        return Assignment(node=assignment.node, shares=(share,), numa=assignment.numa)

    def choose_gang(
        self,
        pods: Sequence[PodRequest],
        topology: TopologyConstraint | None,
        excluded: AbstractSet[str] | None = None,
    ) -> GangPlacement:
        """Where every member of a gang would go, or none (nothing is bound): members with
        claims through `SimClaims.place_gang`, others through placement's `place_gang`."""
        prefer_clique = self.policy.prefer_clique
        claims = [self.claims.get(p.key) for p in pods]
        if not any(claims):
            return place_gang(
                pods,
                self.placer,
                topology=topology,
                prefer_clique=prefer_clique,
                excluded=excluded,
                reasons=False,
            )
        if not all(claims):
            return GangPlacement(ok=False, reason="a gang mixes pods with and without claims")
        return self._claims_placer().place_gang(
            [(p, c or ()) for p, c in zip(pods, claims, strict=True)],
            topology=topology,
            prefer_clique=prefer_clique,
            excluded=excluded,
        )

    def claim_fits(
        self, pods: Sequence[PodRequest], *, gang: bool
    ) -> tuple[ClaimFit | None, ClaimFit | None]:
        """What a unit's claims need as the victim search asks it, for one search: (a single
        pod's `DeviceFit`, a gang's `GangDeviceFit`); (None, None) for pods without claims."""
        claims = [self.claims.get(p.key) for p in pods]
        if not any(claims):
            return None, None
        sim = self._claims_placer()
        if gang:
            return None, sim.gang_fit([(p, c or ()) for p, c in zip(pods, claims, strict=True)])
        return sim.fit(pods[0], claims[0] or ()), None

    def _claims_placer(self) -> SimClaims:
        if self._sim_claims is None:
            self._sim_claims = SimClaims(self.placer)
        return self._sim_claims

    def place(self, pod: PodRequest) -> Assignment | None:
        """Choose and bind; None when `pod` fits nowhere."""
        assignment = self.choose(pod)
        if assignment is not None:
            self.bind(pod, assignment)
        return assignment

    def restart(
        self, policy: SimPolicy, running: Iterable[PodRequest], waiting: Iterable[PodRequest]
    ) -> None:
        """The scheduler restarts with `policy` (what the old one learned is gone) and a fresh
        placer: its learning scores are shown the pods `running` (bound before the restart, as
        the runtime's intake shows them; none: they start from their prior) and told which
        pods are `waiting`."""
        self.policy = policy
        self.placer = self.cluster.placer(policy.scoring)
        self._sim_claims = None
        for pod in running:
            policy.scoring.seen(pod)
        for pod in waiting:
            policy.scoring.queued(pod)

    def queued(self, pod: PodRequest) -> None:
        """`pod` waits to be placed (it arrived, or was evicted); `bind` ends the wait."""
        self.policy.scoring.queued(pod)

    def bind(self, pod: PodRequest, assignment: Assignment) -> None:
        self.cluster.bind(pod, assignment)
        self.policy.scoring.dequeued(pod.key)

    def unbind(self, key: str) -> Assignment | None:
        return self.cluster.unbind(key)
