"""Errors raised by the device-plugin package.

PluginError
├── ResourceError              the inventory cannot be advertised under the configured strategy
├── RequestError               a kubelet request refused as a whole (names the ID and the reason)
│   ├── InvalidRequestError      unknown or duplicate IDs, too many replicas -> INVALID_ARGUMENT
│   ├── DeviceUnavailableError   unhealthy device, no CDI spec names it      -> FAILED_PRECONDITION
│   └── ClaimError               a DRA claim this node may not prepare (names claim and field)
└── RegistrationError          the kubelet refused or did not answer Register
"""

from __future__ import annotations


class PluginError(Exception):
    """Root of the device plugin's errors."""


class ResourceError(PluginError):
    """The node's GPUs cannot be advertised as configured (e.g. `single`, mixed profiles)."""


class RequestError(PluginError):
    """A request from the kubelet that is refused as a whole; nothing of it is applied."""


class InvalidRequestError(RequestError):
    """The request itself is wrong: an unknown or duplicate ID, or more replicas than allowed."""


class DeviceUnavailableError(RequestError):
    """The request is well formed but a device cannot be handed out now."""


class ClaimError(RequestError):
    """A ResourceClaim the DRA driver refuses to prepare; the message names the claim and field."""


class RegistrationError(PluginError):
    """Registering with the kubelet failed."""
