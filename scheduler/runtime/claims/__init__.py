"""DRA claims in the running scheduler: the claim book (classes, slices, claims and what they
hold, each node as claims see it) and which claims a pod uses; the pure allocator is
`scheduler.claims`, the claim writes of a bind `scheduler.runtime.binding.claimbind`."""
