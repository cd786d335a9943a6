"""The DRA driver's wire facts and its pure codec (DESIGN §14): inventory -> devices -> slices.

`devices` names and describes what the driver publishes (one device per whole GPU and per MIG
device, with attributes and capacity); `slices` turns those into `resource.k8s.io/v1`
ResourceSlice objects for one node and plans the writes that make the API server hold them.
Nothing here does I/O: the agent's Kubernetes calls live in `agent.kube`.
"""

from __future__ import annotations

from agent.resource_names import DRA_DRIVER

DRIVER = DRA_DRIVER
"""The driver name: in every ResourceSlice, allocation result and the kubelet registration."""

GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
SLICES = "resourceslices"
CLAIMS = "resourceclaims"
DEVICE_CLASSES = "deviceclasses"

UNHEALTHY_TAINT = f"{DRIVER}/unhealthy"
"""Taint key an Unhealthy device carries in its slice (effect NoSchedule)."""
