"""The scheduler as a running process: watches in, decisions out, API writes off the loop.

Rooms, from the bottom up (import-linter keeps them acyclic):
- `cluster`: the cache and what it is built from (each object as read once, the books of queues,
  budgets and running units, the placement snapshot);
- `binding`: what a bind writes beyond `pods/binding` (a share's lock and annotation, a pod's
  ResourceClaims: finalizer, allocation and reservation);
- `claims`: the claim book (DeviceClasses, ResourceSlices, ResourceClaims, what they hold) and
  a pod with claims decided on the cache (the allocator itself is `scheduler.claims`);
- `queues`: admission, turns and Queue status;
- `preempting`: nominations and evictions around the pure victim search;
- `gangs`: attempts, timeouts and PodGroup status;
- at the top, `intake` (the watch sink feeding `cluster`), `loop` (one unit per cycle, parallel
  binds), `pending` (the scheduling queue), `reporter` and `metrics` (what users see).
"""
