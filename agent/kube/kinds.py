"""The custom resources of ours that more than one part reads, by group, version and plural.

Light (no imports): the scheduler's API edge reads them without the `kubernetes` client.
"""

QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "scheduling.gputopo.io", "v1alpha1", "queues"
"""The Queue CRD (DESIGN §10), cluster-scoped; only the scheduler writes its status."""
PODGROUP_GROUP, PODGROUP_VERSION, PODGROUPS = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
"""Our PodGroups (scheduler-plugins' coscheduling CRD), namespaced."""
