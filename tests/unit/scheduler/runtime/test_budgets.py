"""PodDisruptionBudgets as the victim search reads them: the pods each covers, kept as pods and
budgets change, and `disruptionsAllowed` (0 until the current spec was processed)."""

from __future__ import annotations

import pytest

from agent.objkey import object_key
from scheduler.runtime.cluster.budgets import BudgetBook
from scheduler.runtime.cluster.podinfo import read_pod
from tests.builders.fakeapi import make_pdb
from tests.builders.pods import pod


def _pdb(name: str, selector: dict | None, allowed: int, processed: bool = True) -> dict:
    body = make_pdb(name)
    body["metadata"].update(namespace="team", generation=2)
    if selector is not None:
        body["spec"]["selector"] = selector
    body["status"] = {"disruptionsAllowed": allowed, "observedGeneration": 2 if processed else 1}
    return body


def _pod(name: str, **labels: str):
    return read_pod(pod(name, "team", labels=labels), "s")


@pytest.mark.parametrize(
    ("selector", "covered"),
    [
        pytest.param({"matchLabels": {"app": "db"}}, {"db-0"}, id="matchLabels"),
        pytest.param(
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]},
            {"web-0", "bare"},
            id="NotIn",
        ),
        pytest.param({}, {"db-0", "web-0", "bare"}, id="empty selector: every pod"),
        pytest.param(None, set(), id="no selector: no pod"),
    ],
)
def test_a_budget_covers_the_pods_its_selector_matches_in_its_namespace(selector, covered):
    pods = [_pod("db-0", app="db"), _pod("web-0", app="web"), _pod("bare")]
    elsewhere = read_pod(pod("db-9", "other", labels={"app": "db"}), "s")
    book = BudgetBook()
    book.replace([_pdb("b", selector, 1)], [*pods, elsewhere])
    budgets = book.budgets()
    assert {k.split("/")[1] for b in budgets for k in b.pods} == covered
    assert all(b.name == "team/b" and b.allowed == 1 for b in budgets)


def test_pod_and_budget_changes_are_followed():
    book = BudgetBook()
    book.apply("ADDED", _pdb("b", {"matchLabels": {"app": "db"}}, 2), [])
    assert book.budgets() == ()
    book.on_pod(object_key("team", "db-0"), _pod("db-0", app="db"), "team")
    assert book.budgets()[0].pods == {"team/db-0"}
    book.apply("MODIFIED", _pdb("b", {"matchLabels": {"app": "db"}}, 0), [])
    assert book.budgets()[0].allowed == 0
    book.on_pod(object_key("team", "db-0"), _pod("db-0", app="web"), "team")
    assert book.budgets() == ()
    book.on_pod(object_key("team", "db-0"), _pod("db-0", app="db"), "team")
    book.apply("DELETED", _pdb("b", None, 0), [])
    assert book.budgets() == ()


def test_an_unprocessed_or_malformed_budget_allows_no_disruption():
    book = BudgetBook()
    pods = [_pod("db-0", app="db")]
    book.replace([_pdb("late", {"matchLabels": {"app": "db"}}, 5, processed=False)], pods)
    assert book.budgets()[0].allowed == 0
    odd = {"matchExpressions": [{"key": "app", "operator": "Near"}]}
    book.replace([_pdb("odd", odd, 5)], pods)
    assert book.budgets() == ()
