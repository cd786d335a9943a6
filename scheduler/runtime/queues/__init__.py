"""Queues in the loop: which leaf goes next, admission against shares, per-model quota, and what is
written to a Queue's status (the Queue objects are booked in
`scheduler.runtime.cluster.queuebook`)."""
