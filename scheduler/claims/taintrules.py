"""DeviceTaintRules (resource.k8s.io/v1, GA and on by default in 1.37): taints an administrator
puts on devices without touching their ResourceSlices, as kube-scheduler applies them.

A rule's `deviceSelector` picks devices by `driver`, `pool` and `device` name, each when set
(an empty selector picks every device, a missing one none); its one `taint` is added to each
device it picks, and keeps off requests that do not tolerate it as a slice's own taint does.
A taint with effect `None` is informational and keeps nothing off (dropped, as in slices).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from scheduler.placement import Effect, Taint

from .model import Device
from .wire import Fields, fields_of

__all__ = ["TaintRule", "parse_taint", "parse_taint_rule", "tainted"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaintRule:
    """One DeviceTaintRule: the devices it picks (each of `driver`, `pool`, `device` when not
    None; `picks_none` when it has no selector) and the taint it adds (None: effect `None`)."""

    name: str
    taint: Taint | None
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    picks_none: bool = False

    def picks(self, device: Device) -> bool:
        if self.picks_none:
            return False
        found = device.id
        return (
            (self.driver is None or self.driver == found.driver)
            and (self.pool is None or self.pool == found.pool)
            and (self.device is None or self.device == found.device)
        )


def parse_taint(taint: Fields) -> Taint | None:
    """A device taint; None for effect `None` (it keeps no request off the device)."""
    effect = taint.text("effect", Effect.NO_SCHEDULE.value)
    if effect == "None":
        return None
    if effect not in {Effect.NO_SCHEDULE, Effect.NO_EXECUTE}:
        raise taint.error("effect", f"unknown effect {effect!r}")
    return Taint(key=taint.text("key"), value=taint.text("value", ""), effect=Effect(effect))


def parse_taint_rule(obj: object) -> TaintRule:
    top = fields_of("DeviceTaintRule", obj)
    spec = top.sub("spec")
    name = top.sub("metadata").text("name")
    taint = parse_taint(spec.sub("taint", required=True))
    if not spec.has("deviceSelector"):
        return TaintRule(name=name, taint=taint, picks_none=True)
    selector = spec.sub("deviceSelector")
    return TaintRule(
        name=name,
        taint=taint,
        driver=selector.opt_str("driver"),
        pool=selector.opt_str("pool"),
        device=selector.opt_str("device"),
    )


def tainted(devices: Iterable[Device], rules: Iterable[TaintRule]) -> list[Device]:
    """`devices`, each with the taints of the rules that pick it added (the same object when
    none does)."""
    active = [r for r in rules if r.taint is not None]
    out = []
    for device in devices:
        extra = tuple(r.taint for r in active if r.taint is not None and r.picks(device))
        out.append(replace(device, taints=device.taints + extra) if extra else device)
    return out
