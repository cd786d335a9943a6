"""The claim book's node views under ResourceSlice events: a view built from the node's own
slices and the shared ones (`allNodes`, `nodeSelector`) always equals one built from every slice,
and a slice event leaves the view of every node it does not serve the same object."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from scheduler.claims.parse import parse_slice, parse_taint_rule
from scheduler.claims.slices import node_devices, serves
from scheduler.runtime.claims.book import RULES, SLICES, ClaimBook
from tests.builders.claims import gpu_device, shared_slice_obj, slice_obj, taint_rule_obj

NODES = ("n0", "n1", "n2", "n3")
LABELS = {"n0": {"rack": "a"}, "n1": {"rack": "a"}, "n2": {"rack": "b"}, "n3": {}}
NAMES = tuple(f"s{i}" for i in range(6))

devices = st.lists(st.integers(0, 7), max_size=3, unique=True).map(
    lambda minors: [gpu_device(m) for m in minors]
)
node_local = st.builds(
    lambda name, node, devs, gen, count: slice_obj(
        node, devs, name=name, generation=gen, count=count
    ),
    st.sampled_from(NAMES),
    st.sampled_from(NODES),
    devices,
    st.integers(1, 3),
    st.integers(1, 2),
)
shared = st.builds(
    lambda name, pool, devs, gen, label: shared_slice_obj(
        name, pool, devs, generation=gen, label=label
    ),
    st.sampled_from(NAMES),
    st.sampled_from(("net-a", "net-b")),
    devices,
    st.integers(1, 3),
    st.none() | st.sampled_from([("rack", "a"), ("rack", "b")]),
)

selectors = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "pool": st.sampled_from(("n0", "n1", "net-a")),
        "device": st.sampled_from(("gpu-0", "gpu-1")),
    },
)
taint_rules = st.builds(
    lambda name, effect, selector: taint_rule_obj(name, effect=effect, selector=selector),
    st.sampled_from(("r0", "r1")),
    st.sampled_from(("NoSchedule", "NoExecute", "None")),
    selectors,
)


class SliceEvents(RuleBasedStateMachine):
    """Slice and DeviceTaintRule events in any order: every node's view is what a full rebuild
    gives, and a slice event keeps the views of the nodes it does not serve."""

    def __init__(self) -> None:
        super().__init__()
        self.book = ClaimBook()
        self.stored: dict[str, dict[str, Any]] = {}
        self.rules: dict[str, dict[str, Any]] = {}

    @rule(obj=taint_rules)
    def put_rule(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.book.apply(RULES, "MODIFIED" if name in self.rules else "ADDED", obj)
        self.rules[name] = obj

    @rule(name=st.sampled_from(("r0", "r1")))
    def delete_rule(self, name: str) -> None:
        old = self.rules.pop(name, None)
        self.book.apply(RULES, "DELETED", old or {"metadata": {"name": name}})

    @rule(obj=node_local | shared)
    def put(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        etype = "MODIFIED" if name in self.stored else "ADDED"
        before = {n: self._view(n) for n in NODES}
        self.book.apply(SLICES, etype, obj)
        old = self.stored.get(name)
        self.stored[name] = obj
        self._others_kept(before, [old, obj])

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name: str) -> None:
        old = self.stored.pop(name, None)
        before = {n: self._view(n) for n in NODES}
        self.book.apply(SLICES, "DELETED", old or {"metadata": {"name": name}})
        self._others_kept(before, [old])

    @rule(items=st.lists(node_local | shared, max_size=4))
    def relist(self, items: list[dict[str, Any]]) -> None:
        latest = {o["metadata"]["name"]: o for o in items}
        self.book.replace(SLICES, latest.values())
        self.stored = dict(latest)

    def _view(self, node: str) -> Any:
        return self.book.node(node, LABELS[node], None, None)

    def _others_kept(self, before: dict[str, Any], touched: list[Any]) -> None:
        """Nodes that no touched slice (as it was or is now) serves keep the same view."""
        slices = [parse_slice(o) for o in touched if o is not None]
        for node in NODES:
            if not any(serves(s, node, LABELS[node]) for s in slices):
                assert self._view(node) is before[node]

    @invariant()
    def every_view_equals_a_full_rebuild(self) -> None:
        every = [parse_slice(o) for o in self.stored.values()]
        rules = [parse_taint_rule(self.rules[n]) for n in sorted(self.rules)]
        for node in NODES:
            expected = node_devices(every, node, LABELS[node], rules)
            assert self._view(node).devices == expected


TestSliceEvents = SliceEvents.TestCase
TestSliceEvents.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


def test_a_nodes_view_follows_its_labels_though_its_devices_stay() -> None:
    """What a claim allocated with a label nodeSelector is matched by: a relabelled node's view
    has its new labels, though nothing it can use changed."""
    book = ClaimBook()
    book.apply(SLICES, "ADDED", slice_obj("n0", [gpu_device(0)]))
    first = book.node("n0", {"rack": "a"}, None, None)
    moved = book.node("n0", {"rack": "b"}, None, None)
    assert moved.labels == {"rack": "b"}
    assert moved.devices == first.devices
    assert book.node("n0", moved.labels, None, None) is moved
