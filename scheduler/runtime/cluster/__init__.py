"""The cache and what it is built from: each pod, node, NRT, PodGroup (ours and upstream), Queue,
ElasticQuota and PDB as read once when it arrives, the books kept of them (queues, budgets, the
running units), and the placement snapshot. The bottom room of the runtime: the other rooms read it,
it imports none of them. The watch intake that feeds it is `scheduler.runtime.intake`."""
