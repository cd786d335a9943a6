"""The kubelet-facing DRA driver `gpu.gputopo.io` (DESIGN §14).

`wire` holds the kubelet's DRA facts (plugin type, service names, socket paths); `claims` reads a
ResourceClaim's allocation for this node; `record` keeps what was prepared, on the node;
`cdi_specs` writes one CDI spec per claim; `prepare` turns Node(Un)PrepareResources into those
steps; `servicers` speaks the protobuf; `plugin` serves the sockets as one agent service.
"""
