"""The NodeResourceTopology codec: a pure translation, both ways, between the node model (inventory
plus what is free) and the topology.node.k8s.io/v1alpha2 object, as a plain dict.

    encode(inventory, availability, node_name=...) -> dict      (agent.nrt.encode)
    decode(obj) -> DecodedTopology                              (agent.nrt.decode)

The wire names both halves share (group, version, kind, zone and attribute names, the GPU cost
encoding) are defined once in `agent.nrt.wire`; callers import everything from this package.
"""

from agent.nrt.decode import DecodedTopology, decode
from agent.nrt.encode import encode, is_gpu_free, is_whole_gpu
from agent.nrt.wire import (
    API_VERSION,
    ATTR_FINGERPRINT,
    ATTR_FINGERPRINT_METHOD,
    ATTR_POLICY,
    ATTR_SCHEMA,
    ATTR_SCOPE,
    ATTR_SOURCE,
    GPU_ATTR_HEALTH,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    gpu_zone_name,
    legacy_topology_policy,
)

__all__ = [
    "API_VERSION",
    "ATTR_FINGERPRINT",
    "ATTR_FINGERPRINT_METHOD",
    "ATTR_POLICY",
    "ATTR_SCHEMA",
    "ATTR_SCOPE",
    "ATTR_SOURCE",
    "GPU_ATTR_HEALTH",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "DecodedTopology",
    "decode",
    "encode",
    "gpu_zone_name",
    "is_gpu_free",
    "is_whole_gpu",
    "legacy_topology_policy",
]
