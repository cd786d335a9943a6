"""Queues and elastic quotas (DESIGN §10), pure: the tree, usage, admission, order, fair share.

Standard library, the agent core and `scheduler.placement` (for `PodRequest`) only; no I/O, no
clock. The scheduler runtime and the simulator both decide through these functions.

Modules, bottom up: `amounts` (quota units), `spec` (a Queue or ElasticQuota read), `tree` (the
validated tree), `usage` (subtree usage from charged pods), `resolve` (which queue a pod is in),
`admission` (max at every level, within guarantee), `order` (which queue next; fair share),
`models` (keys per GPU model), `modelfilter` (the nodes a model quota keeps a unit off or prefers),
`capacity` (the root's capacity from nodes, each shared GPU counted once).
"""

from .admission import (
    admission_problem,
    admission_problem_of,
    guaranteed_models,
    queue_problem,
    within_guarantee,
)
from .amounts import (
    Amounts,
    add_into,
    allocatable_amounts,
    format_amount,
    parse_amount,
    request_amounts,
)
from .order import QueueOrder, below_min, choose_leaf, dominant_share, fair_shares
from .resolve import resolve_queue
from .spec import (
    DEFAULT_QUEUE,
    ELASTIC_PREFIX,
    QUEUE_LABEL,
    ROOT,
    QueueSpec,
    read_elastic_quota,
    read_queue,
)
from .tree import Problem, QuotaTree
from .usage import Charge, Usage

__all__ = [
    "DEFAULT_QUEUE",
    "ELASTIC_PREFIX",
    "QUEUE_LABEL",
    "ROOT",
    "Amounts",
    "Charge",
    "Problem",
    "QueueOrder",
    "QueueSpec",
    "QuotaTree",
    "Usage",
    "add_into",
    "admission_problem",
    "admission_problem_of",
    "allocatable_amounts",
    "below_min",
    "choose_leaf",
    "dominant_share",
    "fair_shares",
    "format_amount",
    "guaranteed_models",
    "parse_amount",
    "queue_problem",
    "read_elastic_quota",
    "read_queue",
    "request_amounts",
    "resolve_queue",
    "within_guarantee",
]
