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

from agent.model import LinkMatrix

__all__ = ["GpuSelector", "SetObjective", "SharedSlot", "objective", "pack_shared", "select_gpus"]

SetObjective = tuple[int, int, int]
"""(NVLinks summed over pairs, PCIe distance summed over pairs, distinct NUMA nodes)."""

_MEMO_LIMIT = 200_000


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
        must = _mask(must_include)
        avail = _mask(available) & ~must
        key = (avail, must, size)
        if key not in self._memo:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = self._solve(avail, must, size)
        return self._memo[key]

    def objective_of(self, gpus: Sequence[int]) -> SetObjective:
        """`objective` on this selector's matrix."""
        nv = sum(self._nv[a][b] for i, a in enumerate(gpus) for b in gpus[i + 1 :])
        pc = sum(self._pc[a][b] for i, a in enumerate(gpus) for b in gpus[i + 1 :])
        numa = 0
        for g in gpus:
            numa |= self._numa_bit[g]
        return nv, pc, numa.bit_count()

    def _solve(self, avail: int, must: int, size: int) -> tuple[int, ...] | None:
        chosen = _indices(must)
        if size < len(chosen) or size > len(chosen) + avail.bit_count() or size < 0:
            return None
        if size == len(chosen):
            return tuple(chosen)
        search = _Search(self, _indices(avail), chosen, size)
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
        self.chosen = list(chosen)
        self.gain_nv = [sum(self.nv[c][s] for s in chosen) for c in range(len(self.nv))]
        self.gain_pc = [sum(self.pc[c][s] for s in chosen) for c in range(len(self.nv))]
        numa = 0
        for s in chosen:
            numa |= self.numa_bit[s]
        self.base = (
            sum(self.nv[a][b] for i, a in enumerate(chosen) for b in chosen[i + 1 :]),
            sum(self.pc[a][b] for i, a in enumerate(chosen) for b in chosen[i + 1 :]),
            numa,
        )

    def run(self) -> tuple[int, ...] | None:
        nv, pc, numa = self.base
        self._dfs(0, nv, pc, numa, 0)
        return self.best

    def _dfs(self, pos: int, nv: int, pc: int, numa: int, skipped: int) -> None:
        need = self.size - len(self.chosen)
        if need == 0:
            key = (-nv, pc, numa.bit_count())
            if self.best_key is None or key < self.best_key:
                self.best_key, self.best = key, tuple(sorted(self.chosen))
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
        for x in self.cands:
            self.gain_nv[x] += self.nv[c][x]
            self.gain_pc[x] += self.pc[c][x]

    def _untake(self, c: int) -> None:
        self.chosen.pop()
        for x in self.cands:
            self.gain_nv[x] -= self.nv[c][x]
            self.gain_pc[x] -= self.pc[c][x]

    def _bound_fails(self, rest: list[int], need: int, nv: int, pc: int, numa: int) -> bool:
        """True when no completion from here can beat the best set found so far."""
        if self.best_key is None:
            return False
        best_nv, best_pc, best_numa = -self.best_key[0], self.best_key[1], self.best_key[2]
        # Each new pair among the picks is split half to each end (values doubled to stay integral).
        nv_ub = 2 * nv + _top_sum(
            [
                2 * self.gain_nv[c]
                + _top_sum([self.nv[c][d] for d in rest if d != c], need - 1, True)
                for c in rest
            ],
            need,
            True,
        )
        if nv_ub < 2 * best_nv:
            return True
        if nv_ub > 2 * best_nv:
            return False
        pc_lb = 2 * pc + _top_sum(
            [
                2 * self.gain_pc[c]
                + _top_sum([self.pc[c][d] for d in rest if d != c], need - 1, False)
                for c in rest
            ],
            need,
            False,
        )
        if pc_lb != 2 * best_pc:
            return pc_lb > 2 * best_pc
        return numa.bit_count() >= best_numa


def _top_sum(values: list[int], k: int, largest: bool) -> int:
    if k <= 0:
        return 0
    ordered = sorted(values, reverse=largest)
    return sum(ordered[:k])


def _mask(indices: Sequence[int]) -> int:
    m = 0
    for g in indices:
        m |= 1 << g
    return m


def _indices(mask: int) -> list[int]:
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
