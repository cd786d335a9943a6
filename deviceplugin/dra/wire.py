"""Wire facts of the kubelet's DRA plugin API and our socket and CDI names (DESIGN §14)."""

from __future__ import annotations

from pathlib import Path

from agent.dra import DRIVER

PLUGIN_TYPE = "DRAPlugin"
"""`PluginInfo.type` of a DRA driver in the plugin watcher."""

V1_SERVICE = "v1.DRAPlugin"
V1BETA1_SERVICE = "v1beta1.DRAPlugin"
HEALTH_SERVICE = "v1alpha1.DRAResourceHealth"
SUPPORTED_VERSIONS = (V1_SERVICE, V1BETA1_SERVICE, HEALTH_SERVICE)
"""What we advertise, most preferred first: the kubelet takes the first DRA service it knows."""

REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
REGISTRATION_SOCKET = f"{DRIVER}-reg.sock"
SERVICE_SOCKET = "dra.sock"
RECORD_FILE = "prepared-claims.json"
"""Kept beside the service socket: which claims this node has prepared, and how."""

CDI_DIR = Path("/var/run/cdi")
CDI_VENDOR = "k8s.gputopo.io"
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
CDI_VERSION = "0.5.0"


def cdi_device_name(claim_uid: str, device: str) -> str:
    """The CDI device of one allocated device of a claim: `<claim UID>-<device>`."""
    return f"{claim_uid}-{device}"


def cdi_device_id(claim_uid: str, device: str) -> str:
    """Fully qualified: `k8s.gputopo.io/claim=<claim UID>-<device>`."""
    return f"{CDI_KIND}={cdi_device_name(claim_uid, device)}"


def cdi_spec_file(claim_uid: str) -> str:
    return f"{CDI_VENDOR}-{CDI_CLASS}_{claim_uid}.json"
