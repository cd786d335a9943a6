"""DRA claims allocated by gputopo-scheduler (DESIGN §14 "Allocation"): pure, its own room.
What the runtime calls, and how, is in CLAIMS.md here.

resource.k8s.io/v1 objects in (`parse`, `slices`), CEL device selectors with the Kubernetes
extensions (`selectors`, `cel_ext`, `semver`), the structured allocator with Kubernetes'
semantics (`candidates` filters, `search` backtracks over requests and constraints, `order` puts
the placement's preferred devices first, `usage` counts what is taken, `decision` the answer's
types, `verdicts` what is kept between pods, `allocator` decides per node, pod and gang), the
decision out in the shape of `status.allocation` (`status`), and what allocated claims charge a
pod's queue (`charge`).

Modules, bottom up: `errors`, `semver`, `model`, `wire`, `slices`, `parse`, `cel_ext`,
`selectors`, `usage`, `charge`, `candidates`, `order`, `search`, `status`, `decision`, `verdicts`,
`allocator`.
"""
