"""Gangs in the loop: attempts, timeouts and the status written on their PodGroups (the PodGroups
themselves are read in `scheduler.runtime.cluster.groups` and `.upstream`)."""
