"""Pure placement: the best GPU set on a node, filter/score/pick for one pod, gang placement.

Standard library and `agent.model` only; no I/O, no wall clock, no unseeded randomness. Used by the
device plugin (`select_gpus`, `pack_shared`), the scheduler runtime and the simulator, so the node
the scheduler predicts and the GPUs the kubelet hands out agree.

Modules, bottom up: `topology` (GPU sets), `request` (what a pod asks), `node` (one node's state),
`filters`, `scores`, `snapshot` (nodes + indexes), `pick` (one pod), `gang` (a pod group).
"""

from .filters import NodeFit, choose_devices, filter_node
from .gang import GangPlacement, TopologyConstraint, place_gang, topology_domains
from .node import GPU_PRODUCT_LABEL, Assignment, NodeState, TopologyPolicy
from .pick import Decision, Picker, VerdictCache, format_reasons, pick, score_node
from .request import (
    Effect,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Operator,
    PodRequest,
    Taint,
    Toleration,
    mig_resource,
)
from .scores import SCORE_FUNCTIONS, Learner, ScoreFn, Scoring, WeightedScore, default_scoring
from .snapshot import Snapshot

__all__ = [
    "GPU_PRODUCT_LABEL",
    "SCORE_FUNCTIONS",
    "Assignment",
    "Decision",
    "Effect",
    "GangPlacement",
    "Learner",
    "NodeFit",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeState",
    "Operator",
    "Picker",
    "PodRequest",
    "ScoreFn",
    "Scoring",
    "Snapshot",
    "Taint",
    "Toleration",
    "TopologyConstraint",
    "TopologyPolicy",
    "VerdictCache",
    "WeightedScore",
    "choose_devices",
    "default_scoring",
    "filter_node",
    "format_reasons",
    "mig_resource",
    "pick",
    "place_gang",
    "score_node",
    "topology_domains",
]
