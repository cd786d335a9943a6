"""Preemption glue: nominations when a unit cannot start, and the eviction writes. The victim search
itself is the pure `scheduler.preemption`; the units and budgets it reads are booked in
`scheduler.runtime.cluster`."""
