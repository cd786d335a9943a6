"""DRA claims allocated by gputopo-scheduler (DESIGN §14 "Allocation"): pure, its own room.

resource.k8s.io/v1 objects in (`parse`, `slices`), CEL device selectors with the Kubernetes
extensions (`selectors`, `cel_ext`, `semver`), the structured allocator with Kubernetes'
semantics (`candidates` filters, `search` backtracks over requests and constraints, `order` puts
the placement's preferred devices first, `usage` counts what is taken, `allocator` decides per
node, pod and gang) and the decision out in the shape of `status.allocation` (`status`).

Modules, bottom up: `errors`, `semver`, `model`, `wire`, `slices`, `parse`, `cel_ext`,
`selectors`, `usage`, `candidates`, `order`, `search`, `allocator`, `status`.
"""
