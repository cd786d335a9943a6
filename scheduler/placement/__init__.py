"""Pure placement: one decision API (`Placer`) for single pods and gangs, and what it decides with.

Standard library, numpy and the agent core only; no I/O, no wall clock, no unseeded randomness.
The scheduler runtime, the simulator and the benchmarks decide through a `Placer` bound to their
live `Snapshot`; `place_gang` places a pod group through one.

Modules, bottom up: `request` (what a pod asks), `node` (one node's state), `filters`, `fgd` and
`fragscores` (fragmentation scores), `scores` (`Scoring`), `sorted_names` (an index bucket),
`snapshot` (nodes + indexes + change tracking), `interpod` (the nodes inter-pod affinity,
anti-affinity and topology spread refuse a pod), `pick` (the plain decision: the reference, and
the path with a candidate limit), `node_slots` and `class_verdicts` (the memo's bookkeeping),
`verdict_memo` (decisions memoised per pod class), `placer` (the decision API), `gang` (a pod
group), `tree` (a tree of pod groups, group by group).
"""

from .filters import NodeFit, choose_devices, filter_node
from .gang import (
    CLIQUE_LABEL,
    GangPlacement,
    TopologyConstraint,
    domains_holding,
    excluding_outside,
    member_domains,
    place_gang,
    place_most_in_one_domain,
    placed_domain,
    topology_domains,
)
from .gpushare import GpuShare
from .node import GPU_PRODUCT_LABEL, Assignment, NodeState, TopologyPolicy
from .pick import Decision, format_reasons, score_node
from .placer import Placer
from .request import (
    Effect,
    InterPodRules,
    LabelSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Operator,
    PodRequest,
    PodTerm,
    SpreadConstraint,
    Taint,
    Toleration,
    mig_resource,
)
from .scores import SCORE_FUNCTIONS, Learner, ScoreFn, Scoring, WeightedScore, default_scoring
from .snapshot import Snapshot
from .tree import Placed, Tree, TreeSide, place_subtree

__all__ = [
    "CLIQUE_LABEL",
    "GPU_PRODUCT_LABEL",
    "SCORE_FUNCTIONS",
    "Assignment",
    "Decision",
    "Effect",
    "GangPlacement",
    "GpuShare",
    "InterPodRules",
    "LabelSelector",
    "Learner",
    "NodeFit",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeState",
    "Operator",
    "Placed",
    "Placer",
    "PodRequest",
    "PodTerm",
    "ScoreFn",
    "Scoring",
    "Snapshot",
    "SpreadConstraint",
    "Taint",
    "Toleration",
    "TopologyConstraint",
    "TopologyPolicy",
    "Tree",
    "TreeSide",
    "WeightedScore",
    "choose_devices",
    "default_scoring",
    "domains_holding",
    "excluding_outside",
    "filter_node",
    "format_reasons",
    "member_domains",
    "mig_resource",
    "place_gang",
    "place_most_in_one_domain",
    "place_subtree",
    "placed_domain",
    "score_node",
    "topology_domains",
]
