"""The best GPU set on one node (DESIGN §4), and packing of shared slots (MIG devices, replicas).

`select_gpus` is exact. Its objective, compared in this order:

1. most NVLinks, summed over every pair of the set;
2. smallest summed PCIe distance over every pair (PIX 1, PXB 2, PHB 3, NODE 4, SYS 5; an NVLink
   pair counts 0), see `GpuLink.pcie_distance`;
3. fewest distinct NUMA nodes; a GPU whose NUMA node is unknown (`None`) counts as one more
   NUMA node of its own (every unknown GPU shares that one "unknown" node);
4. lexicographically lowest sorted GPU indices.

The search is a depth-first branch and bound over the candidates in index order ("take" before
"skip", so the first set found with a given objective is the lexicographically lowest). It prunes
with admissible bounds on the NVLink sum and the PCIe sum, and skips symmetric branches: when two
GPUs are interchangeable (same NUMA node, same link to every other GPU) and the lower one was
skipped, the higher one is skipped too. Results are memoised per (available, size) in a
`GpuSelector`, which callers that place repeatedly on one matrix (the device plugin, the
scheduler) keep; `select_gpus` builds a throw-away one.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import add

from agent.model import LinkMatrix

__all__ = ["GpuSelector", "SetObjective", "SharedSlot", "objective", "pack_shared", "select_gpus"]

SetObjective = tuple[int, int, int]
"""(NVLinks summed over pairs, PCIe distance summed over pairs, distinct NUMA nodes)."""

_MEMO_LIMIT = 200_000
_MISSING = object()


def select_gpus(
    links: LinkMatrix,
    numa_of: Sequence[int | None],
    available: Sequence[int],
    must_include: Sequence[int],
    size: int,
) -> tuple[int, ...] | None:
    """The best `size` GPUs (sorted indices) from `available` ∪ `must_include`; None if impossible.

    The result always contains every index of `must_include`. It is None when `size` is smaller than
    `must_include`, larger than the candidates, or an index is outside the matrix.
    """
    return GpuSelector(links, numa_of).select(available, must_include, size)


def objective(
    links: LinkMatrix, numa_of: Sequence[int | None], gpus: Sequence[int]
) -> SetObjective:
    """The module objective of one GPU set: (NVLinks, PCIe distance, distinct NUMA nodes)."""
    nvlinks = pcie = 0
    for pos, a in enumerate(gpus):
        for b in gpus[pos + 1 :]:
            cell = links.link(a, b)
            nvlinks += cell.nvlinks
            pcie += cell.pcie_distance
    return nvlinks, pcie, len({numa_of[g] for g in gpus})


class GpuSelector:
    """`select_gpus` on one fixed link matrix, with the matrix pre-digested and results memoised."""

    def __init__(self, links: LinkMatrix, numa_of: Sequence[int | None]) -> None:
        n = links.size
        if len(numa_of) != n:
            raise ValueError(f"numa_of has {len(numa_of)} entries for a {n}-GPU link matrix")
        self.size = n
        self._nv = [[0 if a == b else links.link(a, b).nvlinks for b in range(n)] for a in range(n)]
        self._pc = [
            [0 if a == b else links.link(a, b).pcie_distance for b in range(n)] for a in range(n)
        ]
        numa_ids = {v: pos for pos, v in enumerate(sorted(set(numa_of), key=_numa_sort_key))}
        self._numa_bit = [1 << numa_ids[v] for v in numa_of]
        self._twin_below = [self._find_twin(g, numa_of) for g in range(n)]
        self._memo: dict[tuple[int, int, int], tuple[int, ...] | None] = {}
        self._objectives: dict[int, SetObjective] = {}
        self._numa_masks: dict[int | None, int] = {}
        for g, v in enumerate(numa_of):
            self._numa_masks[v] = self._numa_masks.get(v, 0) | 1 << g

    def _find_twin(self, g: int, numa_of: Sequence[int | None]) -> int | None:
        """The highest lower index interchangeable with `g` (same NUMA node, same links), if any."""
        for h in range(g - 1, -1, -1):
            if numa_of[h] != numa_of[g]:
                continue
            if all(
                self._nv[g][x] == self._nv[h][x] and self._pc[g][x] == self._pc[h][x]
                for x in range(self.size)
                if x not in (g, h)
            ):
                return h
        return None

    def select(
        self, available: Sequence[int], must_include: Sequence[int], size: int
    ) -> tuple[int, ...] | None:
        """See `select_gpus`."""
        if any(not 0 <= g < self.size for g in (*available, *must_include)):
            return None
        return self.select_mask(_mask(available), _mask(must_include), size)

    def select_mask(self, available: int, must_include: int, size: int) -> tuple[int, ...] | None:
        """`select` with the GPU sets as bitmasks (bit g = GPU g); the memoised entry point."""
        avail = available & ~must_include
        key = (avail, must_include, size)
        found = self._memo.get(key, _MISSING)
        if found is _MISSING:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            found = self._memo[key] = self._solve(avail, must_include, size)
        return found  # type: ignore[return-value]

    def numa_mask(self, numa: int | None) -> int:
        """GPUs on NUMA node `numa` plus those whose NUMA node is unknown; all GPUs for None."""
        if numa is None:
            return (1 << self.size) - 1
        return self._numa_masks.get(numa, 0) | self._numa_masks.get(None, 0)

    def objective_of(self, gpus: Sequence[int]) -> SetObjective:
        """`objective` on this selector's matrix (memoised per set)."""
        mask = _mask(gpus)
        found = self._objectives.get(mask)
        if found is None:
            found = self._objectives[mask] = self._objective(gpus)
        return found

    def best_objective(self, size: int, among: int) -> SetObjective | None:
        """The objective of the best `size`-set within mask `among` (None if there is none)."""
        best = self.select_mask(among, 0, size)
        return None if best is None else self.objective_of(best)

    def _objective(self, gpus: Sequence[int]) -> SetObjective:
        nv = sum(self._nv[a][b] for i, a in enumerate(gpus) for b in gpus[i + 1 :])
        pc = sum(self._pc[a][b] for i, a in enumerate(gpus) for b in gpus[i + 1 :])
        numa = 0
        for g in gpus:
            numa |= self._numa_bit[g]
        return nv, pc, numa.bit_count()

    def _solve(self, avail: int, must: int, size: int) -> tuple[int, ...] | None:
        chosen = mask_indices(must)
        if size < len(chosen) or size > len(chosen) + avail.bit_count() or size < 0:
            return None
        if size == len(chosen):
            return tuple(chosen)
        search = _Search(self, mask_indices(avail), chosen, size)
        return search.run()


class _Search:
    """One branch-and-bound run; the state lives here, not in the selector."""

    def __init__(self, sel: GpuSelector, cands: list[int], chosen: list[int], size: int) -> None:
        self.nv, self.pc, self.numa_bit, self.twin = (
            sel._nv,
            sel._pc,
            sel._numa_bit,
            sel._twin_below,
        )
        self.cands = cands
        self.size = size
        self.best_key: tuple[int, int, int] | None = None
        self.best: tuple[int, ...] | None = None
        self.exact = False
        self._saved: list[tuple[list[int], list[int]]] = []
        self.chosen = list(chosen)
        self.gain_nv = [sum(self.nv[c][s] for s in chosen) for c in range(len(self.nv))]
        self.gain_pc = [sum(self.pc[c][s] for s in chosen) for c in range(len(self.nv))]
        numa = 0
        for s in chosen:
            numa |= self.numa_bit[s]
        self.nv_top = self._suffix_sums(self.nv, True)
        self.pc_low = self._suffix_sums(self.pc, False)
        self.base = (
            sum(self.nv[a][b] for i, a in enumerate(chosen) for b in chosen[i + 1 :]),
            sum(self.pc[a][b] for i, a in enumerate(chosen) for b in chosen[i + 1 :]),
            numa,
        )

    def run(self) -> tuple[int, ...] | None:
        self._greedy_incumbent()
        nv, pc, numa = self.base
        self._dfs(0, nv, pc, numa, 0)
        return self.best

    def _greedy_incumbent(self) -> None:
        """A good first answer (not necessarily the lowest indices), so the bounds prune early.

        Until the search itself reaches a set as good (`exact`), ties with it are not pruned.
        """
        nv, pc, numa = self.base
        left = list(self.cands)
        picks: list[int] = []
        for _ in range(self.size - len(self.chosen)):
            c = max(
                left,
                key=lambda x: (
                    self.gain_nv[x],
                    -self.gain_pc[x],
                    -(numa | self.numa_bit[x]).bit_count(),
                    -x,
                ),
            )
            nv, pc, numa = nv + self.gain_nv[c], pc + self.gain_pc[c], numa | self.numa_bit[c]
            left.remove(c)
            picks.append(c)
            self._take(c)
        for c in reversed(picks):
            self._untake(c)
        self.best_key = (-nv, pc, numa.bit_count())
        self.best = tuple(sorted(self.chosen + picks))
        self.exact = False

    def _dfs(self, pos: int, nv: int, pc: int, numa: int, skipped: int) -> None:
        need = self.size - len(self.chosen)
        if need == 0:
            key = (-nv, pc, numa.bit_count())
            if (
                self.best_key is None
                or key < self.best_key
                or (key == self.best_key and not self.exact)
            ):
                self.best_key, self.best = key, tuple(sorted(self.chosen))
                self.exact = True
            return
        rest = self.cands[pos:]
        if len(rest) < need or self._bound_fails(rest, need, nv, pc, numa):
            return
        c = rest[0]
        twin = self.twin[c]
        if twin is None or not skipped >> twin & 1:
            self._take(c)
            self._dfs(
                pos + 1,
                nv + self.gain_nv[c],
                pc + self.gain_pc[c],
                numa | self.numa_bit[c],
                skipped,
            )
            self._untake(c)
        self._dfs(pos + 1, nv, pc, numa, skipped | 1 << c)

    def _take(self, c: int) -> None:
        self.chosen.append(c)
        self._saved.append((self.gain_nv, self.gain_pc))
        self.gain_nv = list(map(add, self.gain_nv, self.nv[c]))
        self.gain_pc = list(map(add, self.gain_pc, self.pc[c]))

    def _untake(self, c: int) -> None:
        del c
        self.chosen.pop()
        self.gain_nv, self.gain_pc = self._saved.pop()

    def _bound_fails(self, rest: list[int], need: int, nv: int, pc: int, numa: int) -> bool:
        """True when no completion from here can beat the best set found so far.

        Each new pair among the picks is split half to each end (values doubled to stay
        integral): a pick adds its links to the chosen GPUs plus half its best links to the rest.
        """
        if self.best_key is None:
            return False
        best_nv, best_pc, best_numa = -self.best_key[0], self.best_key[1], self.best_key[2]
        pos = len(self.cands) - len(rest)
        k = need - 1
        nv_top, pc_low = self.nv_top[pos], self.pc_low[pos]
        gain_nv = self.gain_nv
        gains = sorted([2 * gain_nv[c] + nv_top[c][k] for c in rest], reverse=True)
        nv_ub = 2 * nv + sum(gains[:need])
        if nv_ub != 2 * best_nv:
            return nv_ub < 2 * best_nv
        gain_pc = self.gain_pc
        costs = sorted([2 * gain_pc[c] + pc_low[c][k] for c in rest])
        pc_lb = 2 * pc + sum(costs[:need])
        if pc_lb != 2 * best_pc:
            return pc_lb > 2 * best_pc
        if numa.bit_count() != best_numa:
            return numa.bit_count() > best_numa
        # A tie at best: only a lexicographically lower set can still win.
        return self.exact or tuple(sorted(self.chosen + rest[:need])) >= (self.best or ())

    def _suffix_sums(self, matrix: list[list[int]], largest: bool) -> list[dict[int, list[int]]]:
        """Per suffix start `pos`, per candidate c in it: prefix sums of c's sorted links in it."""
        out = []
        for pos in range(len(self.cands) + 1):
            rest = self.cands[pos:]
            table = {}
            for c in rest:
                ordered = sorted((matrix[c][d] for d in rest if d != c), reverse=largest)
                sums = [0]
                for v in ordered:
                    sums.append(sums[-1] + v)
                table[c] = sums
            out.append(table)
        return out


def _mask(indices: Sequence[int]) -> int:
    m = 0
    for g in indices:
        m |= 1 << g
    return m


def mask_indices(mask: int) -> list[int]:
    """The GPU indices whose bits are set in `mask`, ascending."""
    out = []
    g = 0
    while mask:
        if mask & 1:
            out.append(g)
        mask >>= 1
        g += 1
    return out


def _numa_sort_key(v: int | None) -> tuple[int, int]:
    return (1, 0) if v is None else (0, v)


@dataclass(frozen=True, slots=True)
class SharedSlot:
    """One shareable device: a MIG device or a time-slicing replica (`id`), on GPU `gpu`."""

    id: str
    gpu: int
    numa: int | None


def pack_shared(
    candidates: Sequence[SharedSlot],
    must_include: Sequence[str],
    size: int,
    used_gpus: AbstractSet[int],
) -> tuple[str, ...]:
    """Pick `size` slot IDs: `must_include` first, then greedily the slot that is best by, in order:

    1. on a GPU this request does not hold yet (replicas of one request spread over GPUs);
    2. on a GPU in `used_gpus` (already busy), so idle GPUs stay whole;
    3. on a NUMA node the request already holds (NUMA locality; no preference before the first);
    4. lowest GPU index, then lowest ID.

    Returns the IDs in pick order, or () when fewer than `size` slots exist or a must-include ID
    is not among the candidates.
    """
    by_id = {slot.id: slot for slot in candidates}
    if size < len(set(must_include)) or any(i not in by_id for i in must_include):
        return ()
    picked: list[str] = list(dict.fromkeys(must_include))
    gpus = {by_id[i].gpu for i in picked}
    numas = {by_id[i].numa for i in picked}
    rest = sorted((s for s in candidates if s.id not in set(picked)), key=lambda s: (s.gpu, s.id))
    while len(picked) < size:
        if not rest:
            return ()
        best = min(
            rest,
            key=lambda s: (
                s.gpu in gpus,
                s.gpu not in used_gpus,
                bool(numas) and s.numa not in numas,
            ),
        )
        rest.remove(best)
        picked.append(best.id)
        gpus.add(best.gpu)
        numas.add(best.numa)
    return tuple(picked)
