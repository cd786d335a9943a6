"""Judging placement on many workloads (issue 45): the per-workload table and its summary.

Input: every policy's event-mode runs on each workload (`Outcomes`: workload label -> the
`WorkloadFigures` of each run, one per policy and simulator seed). Per workload and policy the
figures are the mean wait over all pods, the makespan and each pod class's median wait, each
averaged over the simulator's seeds (the node order and `random`'s draws; the workload is the
same at every one). The summary answers the issue's "Verified when":

* *within 5 %*: workloads where `gputopo`'s mean wait and makespan are both at most 1.05 × the
  best of the peers (`PEERS`); a best of 0 s asks for 0 s;
* *average rank*: each policy's rank among all policies (1 = lowest; ties share the lowest rank)
  on mean wait and on makespan, averaged over both and over the workloads;
* *lowest on average*: each policy's mean over the workloads of mean wait and of makespan;
* *class losses*: workloads where some class's median wait under `gputopo` exceeds the best
  packing peer's (`PACKING_PEERS`) by more than max(60 s, 10 %), and how many such workloads
  each class has;
* *the bar's reach*: for every policy, the workloads where it is within 5 % of the best of all
  the *other* policies on both figures (`gputopo`'s own count is `within`): how often any
  policy clears the bar `gputopo` is held to, so the bar can be read against the study's noise;
* *the class bar's reach*: the same for the class losses, for each packing policy (`gputopo` and
  `PACKING_PEERS`): the workloads where one of its classes loses to the best of the other two;
* *class waits*: per class, each policy's median wait averaged over the workloads where every
  policy started a pod of the class: who a policy makes wait (packing keeps big GPU sets whole
  for 8-GPU pods and gangs at some cost to the small pods it stacks).

`pairs` gives, per workload, `gputopo`'s figure beside one peer's (each averaged over the
simulator seeds): the paired samples from which `bench/generalise_study.py` tells a difference
on average from the workloads' chance (a confidence interval and a sign test). `chosen_by`
adds a policy that, on each workload, runs whichever policy did best on it in other outcomes
(the day before: `bench/day_before_study.py`).

`run_generated` and `run_one` make the figures; `figures_document` and `figures_from_document`
turn one run's figures into JSON and back (the study's cache, `bench/generalise_study.py`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from scheduler.config import SchedulerConfig
from scheduler.preemption import PreemptionSettings
from scheduler.sim.events import run_events
from scheduler.sim.generate import DEFAULT_SIZE, Generated, Size, generate
from scheduler.sim.protocol import RunResult
from scheduler.sim.workload import Workload

__all__ = [
    "PACKING_PEERS",
    "PEERS",
    "SUBJECT",
    "Figure",
    "Outcomes",
    "Pair",
    "Summary",
    "WorkloadFigures",
    "average",
    "chosen_by",
    "figures_document",
    "figures_from_document",
    "figures_of",
    "format_rows",
    "format_summary",
    "label_of",
    "pairs",
    "run_generated",
    "run_one",
    "summarise",
]

SUBJECT = "gputopo"
PEERS = ("fgd", "bestfit", "random", "spread")
PACKING_PEERS = ("fgd", "bestfit")
TOLERANCE = 0.05
CLASS_SLACK_S = 60.0
CLASS_SLACK_SHARE = 0.10


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadFigures:
    """One policy on one workload: one run, or the average of `runs` runs (simulator seeds)."""

    workload: str
    policy: str
    mean_wait: float
    makespan: float
    class_p50: Mapping[str, float]  # classes with a started pod
    runs: int = 1


Outcomes = Mapping[str, Sequence[WorkloadFigures]]
Figure = Literal["mean_wait", "makespan"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    workloads: int
    within: int  # workloads where the subject is within TOLERANCE of the best peer on both
    losses: tuple[str, ...]  # the other workloads
    average_rank: Mapping[str, float]
    average_wait: Mapping[str, float]
    average_makespan: Mapping[str, float]
    class_losses: Mapping[str, tuple[str, ...]]  # workload -> classes losing to packing peers
    within_of_others: Mapping[str, int]  # policy -> workloads within TOLERANCE of all the others
    class_losses_of_others: Mapping[str, int] = field(default_factory=dict)
    """Packing policy (the subject and `PACKING_PEERS`) -> workloads where one of its classes
    loses to the best of the other packing policies, as the subject's to the peers'."""
    class_waits: Mapping[str, tuple[int, Mapping[str, float]]] = field(default_factory=dict)
    """Class -> (the workloads where every policy started a pod of it, policy -> its median wait
    there averaged over them)."""

    @property
    def losses_by_class(self) -> dict[str, int]:
        """Class -> the workloads where it loses (most first, then by name)."""
        counts: dict[str, int] = {}
        for lost in self.class_losses.values():
            for cls in lost:
                counts[cls] = counts.get(cls, 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


@dataclass(frozen=True, slots=True)
class Pair:
    """One workload's figure (mean wait or makespan, seconds) under `SUBJECT` and under a peer,
    each the mean of its runs."""

    workload: str
    subject: float
    peer: float

    @property
    def difference(self) -> float:
        """Subject minus peer: below 0 where the subject did better."""
        return self.subject - self.peer


def pairs(outcomes: Outcomes, peer: str, figure: Figure, subject: str = SUBJECT) -> list[Pair]:
    """`subject`'s and `peer`'s `figure` on every workload, in the outcomes' order; ValueError
    naming the workload where either has no run."""
    table = _table(outcomes)
    found = []
    for label, row in table.items():
        missing = [p for p in (subject, peer) if p not in row]
        if missing:
            raise ValueError(f"workload {label}: no run of {', '.join(missing)} to pair")
        found.append(Pair(label, getattr(row[subject], figure), getattr(row[peer], figure)))
    return found


def chosen_by(
    before: Outcomes, today: Outcomes, policies: Sequence[str], figure: Figure, name: str
) -> tuple[dict[str, list[WorkloadFigures]], dict[str, str]]:
    """`today` with one more policy, `name`: on each workload the runs of whichever of
    `policies` had the lowest `figure` on that workload in `before` (the first of a tie, in
    `policies`' order), renamed; and workload -> the policy picked. ValueError naming a
    workload of `today` that `before` lacks, or a policy with no run on it in either."""
    earlier, now = _table(before), _table(today)
    out: dict[str, list[WorkloadFigures]] = {}
    picked: dict[str, str] = {}
    for label, runs in today.items():
        if label not in earlier:
            raise ValueError(f"workload {label}: no runs in the outcomes it is chosen by")
        missing = [p for p in policies if p not in earlier[label] or p not in now[label]]
        if missing:
            raise ValueError(f"workload {label}: no run of {', '.join(missing)} to choose from")
        pick = min(policies, key=lambda p: getattr(earlier[label][p], figure))
        copies = [replace(r, policy=name) for r in runs if r.policy == pick]
        out[label] = [*runs, *copies]
        picked[label] = pick
    return out, picked


def figures_of(workload: str, run: RunResult) -> WorkloadFigures:
    waits = run.waits
    every = waits.get("all")
    return WorkloadFigures(
        workload=workload,
        policy=run.policy,
        mean_wait=(every.mean if every and every.mean is not None else 0.0),
        makespan=(run.figures.makespan or 0.0) if run.figures else 0.0,
        class_p50={c: w.p50 for c, w in waits.items() if c != "all" and w.p50 is not None},
    )


def average(runs: Sequence[WorkloadFigures]) -> WorkloadFigures:
    """The mean of runs of one policy on one workload; a class's median wait is averaged over
    the runs where the class started a pod."""
    first = runs[0]
    classes = sorted({c for run in runs for c in run.class_p50})
    return WorkloadFigures(
        workload=first.workload,
        policy=first.policy,
        mean_wait=statistics.fmean(r.mean_wait for r in runs),
        makespan=statistics.fmean(r.makespan for r in runs),
        class_p50={
            c: statistics.fmean(r.class_p50[c] for r in runs if c in r.class_p50) for c in classes
        },
        runs=sum(r.runs for r in runs),
    )


def _table(outcomes: Outcomes) -> dict[str, dict[str, WorkloadFigures]]:
    """Workload -> policy -> its runs averaged (policies in the order they first appear)."""
    table: dict[str, dict[str, WorkloadFigures]] = {}
    for label, runs in outcomes.items():
        by_policy: dict[str, list[WorkloadFigures]] = {}
        for run in runs:
            by_policy.setdefault(run.policy, []).append(run)
        table[label] = {policy: average(group) for policy, group in by_policy.items()}
    return table


def _within(subject: float, best: float) -> bool:
    return subject <= best * (1 + TOLERANCE)


def _ranks(by_policy: Mapping[str, float]) -> dict[str, int]:
    """1 + how many policies did strictly better."""
    return {p: 1 + sum(v < mine for v in by_policy.values()) for p, mine in by_policy.items()}


def _class_losses(
    row: Mapping[str, WorkloadFigures],
    policy: str = SUBJECT,
    rivals: Sequence[str] = PACKING_PEERS,
) -> tuple[str, ...]:
    """`policy`'s classes whose median wait exceeds the best of `rivals`' by more than the
    slack."""
    mine = row[policy].class_p50
    losing = []
    for cls, wait in sorted(mine.items()):
        peers = [row[p].class_p50[cls] for p in rivals if cls in row[p].class_p50]
        if peers and wait > min(peers) + max(CLASS_SLACK_S, CLASS_SLACK_SHARE * min(peers)):
            losing.append(cls)
    return tuple(losing)


def summarise(outcomes: Outcomes) -> Summary:
    """The summary of the module docstring; every workload needs a run of `gputopo` and of each
    peer."""
    table = _table(outcomes)
    within: list[str] = []
    ranks: dict[str, list[int]] = {}
    policies = list(next(iter(table.values()))) if table else []
    within_of_others = dict.fromkeys(policies, 0)
    for label, row in table.items():
        if _within_best(row, SUBJECT, PEERS):
            within.append(label)
        for policy in policies:
            others = [p for p in row if p != policy]
            within_of_others[policy] += _within_best(row, policy, others)
        for key in ("mean_wait", "makespan"):
            for policy, rank in _ranks({p: getattr(f, key) for p, f in row.items()}).items():
                ranks.setdefault(policy, []).append(rank)
    return Summary(
        workloads=len(table),
        within=len(within),
        losses=tuple(label for label in table if label not in within),
        average_rank={p: statistics.fmean(ranks[p]) for p in policies},
        average_wait={
            p: statistics.fmean(r[p].mean_wait for r in table.values()) for p in policies
        },
        average_makespan={
            p: statistics.fmean(r[p].makespan for r in table.values()) for p in policies
        },
        class_losses={label: lost for label, row in table.items() if (lost := _class_losses(row))},
        within_of_others=within_of_others,
        class_losses_of_others=_class_losses_of_others(table),
        class_waits=_class_waits(table, policies),
    )


def _class_waits(
    table: Mapping[str, Mapping[str, WorkloadFigures]], policies: Sequence[str]
) -> dict[str, tuple[int, dict[str, float]]]:
    classes = sorted({c for row in table.values() for f in row.values() for c in f.class_p50})
    out: dict[str, tuple[int, dict[str, float]]] = {}
    for cls in classes:
        rows = [row for row in table.values() if all(cls in row[p].class_p50 for p in policies)]
        if rows:
            means = {p: statistics.fmean(row[p].class_p50[cls] for row in rows) for p in policies}
            out[cls] = (len(rows), means)
    return out


def _class_losses_of_others(table: Mapping[str, Mapping[str, WorkloadFigures]]) -> dict[str, int]:
    packing = (SUBJECT, *PACKING_PEERS)
    return {
        policy: sum(
            bool(_class_losses(row, policy, [p for p in packing if p != policy]))
            for row in table.values()
        )
        for policy in packing
        if all(policy in row for row in table.values())
    }


def _within_best(row: Mapping[str, WorkloadFigures], policy: str, rivals: Sequence[str]) -> bool:
    """`policy`'s mean wait and makespan both within TOLERANCE of the best of `rivals`."""
    mine = row[policy]
    return _within(mine.mean_wait, min(row[p].mean_wait for p in rivals)) and _within(
        mine.makespan, min(row[p].makespan for p in rivals)
    )


def format_rows(outcomes: Outcomes) -> str:
    """One line per workload and policy: mean wait, makespan, each class's median wait."""
    table = _table(outcomes)
    classes = sorted({c for row in table.values() for f in row.values() for c in f.class_p50})
    head = ["workload", "policy", "mean wait s", "makespan s", *(f"p50 {c}" for c in classes)]
    lines = [head]
    for label, row in table.items():
        for policy, f in row.items():
            cells = [f"{f.class_p50[c]:,.0f}" if c in f.class_p50 else "-" for c in classes]
            lines.append([label, policy, f"{f.mean_wait:,.0f}", f"{f.makespan:,.0f}", *cells])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in lines
    )


def format_summary(summary: Summary) -> str:
    n = summary.workloads
    lines = [
        f"{SUBJECT} within {TOLERANCE:.0%} of the best of {', '.join(PEERS)} on mean wait and "
        f"makespan: {summary.within} of {n}"
        + (f" (not on: {', '.join(summary.losses)})" if summary.losses else ""),
        "average rank (mean wait and makespan; 1 = best): "
        + ", ".join(f"{p} {r:.2f}" for p, r in sorted(summary.average_rank.items(), key=_by_value)),
        "average mean wait s: "
        + ", ".join(
            f"{p} {v:,.0f}" for p, v in sorted(summary.average_wait.items(), key=_by_value)
        ),
        "average makespan s: "
        + ", ".join(
            f"{p} {v:,.0f}" for p, v in sorted(summary.average_makespan.items(), key=_by_value)
        ),
        f"workloads where a class's median wait exceeds the best of {', '.join(PACKING_PEERS)} "
        f"by more than max({CLASS_SLACK_S:.0f} s, {CLASS_SLACK_SHARE:.0%}): "
        f"{len(summary.class_losses)} of {n}",
        *(f"  {label}: {', '.join(c)}" for label, c in summary.class_losses.items()),
    ]
    if summary.class_losses:
        lines.append(
            "losing workloads per class: "
            + ", ".join(f"{c} {count}" for c, count in summary.losses_by_class.items())
        )
    reach = sorted(summary.within_of_others.items(), key=lambda item: (-item[1], item[0]))
    lines.append(
        f"the bar's reach: each policy within {TOLERANCE:.0%} of the best of all the others on "
        "both figures: " + ", ".join(f"{p} {count} of {n}" for p, count in reach)
    )
    if summary.class_losses_of_others:
        packing = sorted(summary.class_losses_of_others.items(), key=_by_value)
        lines.append(
            "the class bar's reach: workloads where a class of each packing policy waits longer "
            "than the best of the other two by as much: "
            + ", ".join(f"{p} {count} of {n}" for p, count in packing)
        )
    if summary.class_waits:
        lines.append(
            "median wait s per class, averaged over the workloads where every policy started one:"
        )
        lines.extend(
            f"  {cls} ({count} of {n}): "
            + ", ".join(f"{p} {v:,.0f}" for p, v in sorted(means.items(), key=_by_value))
            for cls, (count, means) in summary.class_waits.items()
        )
    return "\n".join(lines) + "\n"


def _by_value(item: tuple[str, float]) -> tuple[float, str]:
    return item[1], item[0]


def label_of(made: Generated) -> str:
    """`gen-<seed>/<pattern>`."""
    return f"gen-{made.seed}/{made.pattern.value}"


def run_one(
    made: Generated,
    policy: str,
    sim_seed: int,
    preemption: PreemptionSettings | bool = True,
    config: SchedulerConfig | None = None,
    history: Workload | None = None,
) -> WorkloadFigures:
    """`policy` on the generated workload `made` in event mode, the simulator at `sim_seed`
    (nodes ranked by it, `random`'s draws), `config` the one the gputopo policy uses; `history`
    (another day of the same seed) what `fgd` and the learning scores know beforehand
    (`run_events`)."""
    run = run_events(
        made.cluster,
        made.workload,
        policy,
        sim_seed,
        shuffle_nodes=True,
        preemption=preemption,
        config=config,
        history=history,
    )
    return figures_of(label_of(made), run)


def run_generated(
    seed: int,
    policies: Sequence[str],
    size: Size = DEFAULT_SIZE,
    sim_seeds: Sequence[int] = (1,),
    preemption: PreemptionSettings | bool = True,
    config: SchedulerConfig | None = None,
    history: bool = False,
) -> tuple[str, list[WorkloadFigures]]:
    """The label of the workload of `seed` and every policy's run on it at each of `sim_seeds`
    (the simulator's seeds, apart from the workload's); with `history`, the day before known
    (`run_one`)."""
    made = generate(seed, size)
    before = generate(seed, size, day=-1).workload if history else None
    runs = [
        run_one(made, policy, sim_seed, preemption, config, before)
        for policy in policies
        for sim_seed in sim_seeds
    ]
    return label_of(made), runs


def figures_document(figures: WorkloadFigures) -> dict[str, Any]:
    """One run's figures as JSON."""
    return {
        "workload": figures.workload,
        "policy": figures.policy,
        "meanWait": figures.mean_wait,
        "makespan": figures.makespan,
        "classP50": dict(figures.class_p50),
        "runs": figures.runs,
    }


def figures_from_document(doc: Mapping[str, Any]) -> WorkloadFigures:
    """The inverse of `figures_document`; KeyError or ValueError on a document it did not
    write."""
    return WorkloadFigures(
        workload=str(doc["workload"]),
        policy=str(doc["policy"]),
        mean_wait=float(doc["meanWait"]),
        makespan=float(doc["makespan"]),
        class_p50={str(c): float(v) for c, v in dict(doc["classP50"]).items()},
        runs=int(doc["runs"]),
    )
