"""An `Allocation` in the shape kube-scheduler writes to a claim's `status.allocation`.

`allocation_status` gives the dict: `devices.results[]` (`request`, `driver`, `pool`, `device`,
and `adminAccess`, `shareID`, `consumedCapacity`, `bindingConditions`,
`bindingFailureConditions` where they apply), `devices.config[]` (`source` FromClass or
FromClaim, `requests`, `opaque`), `nodeSelector` (a `metadata.name` field selector for the node,
the devices' slices' selector, or none: `Allocation`) and, for an allocation with binding
conditions, `allocationTimestamp` (the caller's clock, RFC 3339: when the wait for them began).
Quantities are written exactly (`80Gi` stays `85899345920`; a fraction as milli-units `500m`, or
a decimal).
"""

from __future__ import annotations

from fractions import Fraction

from scheduler.placement.nodeselector import selector_wire

from .model import AllocatedDevice, Allocation

__all__ = ["DEFAULT_BINDING_TIMEOUT_SECONDS", "allocation_status", "quantity_text"]

DEFAULT_BINDING_TIMEOUT_SECONDS = 600
"""How long a bind waits for its devices' binding conditions unless configured: kube-scheduler's
default (its DynamicResources `bindingTimeout`)."""


def allocation_status(allocation: Allocation, now: str | None = None) -> dict[str, object]:
    """`now`: the time written as `allocationTimestamp` when the allocation waits for binding
    conditions (kube-scheduler writes it then only)."""
    out: dict[str, object] = {
        "devices": {
            "results": [_result(r) for r in allocation.devices],
            "config": [
                {
                    "source": source,
                    "requests": list(entry.requests),
                    "opaque": {"driver": entry.driver, "parameters": dict(entry.parameters)},
                }
                for source, entry in allocation.config
            ],
        }
    }
    if allocation.node is not None:
        field = {"key": "metadata.name", "operator": "In", "values": [allocation.node]}
        out["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [field]}]}
    elif allocation.node_selector is not None:
        out["nodeSelector"] = selector_wire(allocation.node_selector)
    if allocation.waits and now is not None:
        out["allocationTimestamp"] = now
    return out


def _result(res: AllocatedDevice) -> dict[str, object]:
    out: dict[str, object] = {
        "request": res.request,
        "driver": res.id.driver,
        "pool": res.id.pool,
        "device": res.id.device,
    }
    if res.admin_access:
        out["adminAccess"] = True
    if res.share_id is not None:
        out["shareID"] = res.share_id
    if res.binding_conditions:
        out["bindingConditions"] = list(res.binding_conditions)
        out["bindingFailureConditions"] = list(res.binding_failure_conditions)
    if res.consumed:
        out["consumedCapacity"] = {
            name.rpartition("/")[2] if name.startswith(f"{res.id.driver}/") else name: (
                quantity_text(v)
            )
            for name, v in res.consumed.items()
        }
    return out


def quantity_text(value: Fraction) -> str:
    """An exact quantity string: an integer, milli-units, or a decimal with up to 9 places."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    nano = value * 10**9
    if nano.denominator == 1:
        return f"{nano.numerator}n"
    return f"{float(value):.9f}"
