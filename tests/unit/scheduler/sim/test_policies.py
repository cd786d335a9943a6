"""`scheduler.sim.policies`: the names a user can give, `default` an alias of `gputopo`."""

from __future__ import annotations

import pytest

from scheduler.sim.policies import ALIASES, POLICIES, make_policy, policy_name


def test_gputopo_is_the_schedulers_own_policy_and_default_only_an_alias():
    assert POLICIES[0] == "gputopo"
    assert "default" not in POLICIES
    assert ALIASES == {"default": "gputopo"}
    assert make_policy("default", ()).name == "gputopo"
    weights = [(s.name, s.weight) for s in make_policy("default", ()).scoring.scores]
    assert weights == [(s.name, s.weight) for s in make_policy("gputopo", ()).scoring.scores]


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_keeps_its_name(name: str):
    assert policy_name(name) == name
    assert make_policy(name, ()).name == name


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown policy 'stock'"):
        make_policy("stock", ())
