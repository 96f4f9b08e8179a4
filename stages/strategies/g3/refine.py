"""Stage 3 of g3's partitioner: annealing refinement, run only when Algorithm 1 stops short of its goal.

Algorithm 1 (``g3.py``) swaps one node for one node and only ever accepts a swap that shrinks the largest
remote set. On graphs with hubs that can stall far from ``min/max >= 1 - gamma``: every remaining swap would
first have to make things worse (on cnr-2000 at K = 4 it stops at min/max 0.724, its total remote 1.44 x plain
METIS's). This stage searches the same space with single-node moves under simulated annealing:

* a move takes a boundary node ``w`` (one with a neighbour outside its partition) to the partition of one of
  its neighbours, chosen at random, so moves follow the graph's structure;
* a move is refused if it would push the target's node count above ``balance_tol x mean`` or its degree sum
  above ``degree_tol x mean`` (Eq. 1, Eq. 2; a partition already above a limit may shrink, never grow);
* two phases, each with geometric cooling and its own cost of the remote-set sizes ``R``:

  - **descend** (2/3 of the steps; T from 2 % to 0.01 % of the mean remote set) minimises
    ``||R||_4 + 10 * max(0, sum R - budget)``. The 4-norm is led by the largest sets but every set counts, so
    moves among the smaller partitions are not a blind random walk: with ``max R`` alone the outcome on
    cnr-2000 depended on luck (2 of 11 runs over seeds and temperatures reached the goal), with ``||R||_4``
    every run tried did (docs/BENCHMARKS.md).
  - **level** (from the best assignment of the descend phase; T from 0.1 % to 0.005 %) minimises
    ``max R + 20 * max(0, (1 - gamma) max R - min R) + 100 * max(0, sum R - budget)``: it raises the smallest
    sets to within ``gamma`` of the largest while the budget weighs more than any gain in the gap.

  ``budget`` caps the total remote set (by default 1.05 x plain METIS's total: the communication G3 promises
  not to exceed). A worse move is accepted with probability ``exp(-(cost increase) / T)``.
* each phase keeps the best assignment it has seen (the phase's start included); the run stops as soon as
  ``min/max >= 1 - gamma`` within the budget.

Counters are those of Algorithm 1 (``arc_cnt[u, i]`` arcs from ``u`` into ``i``; ``nb_cnt[v, x]`` symmetrised
neighbours of ``v`` in ``x``): a move updates ``O(d_w)`` counters and only ``R_a``, ``R_b``; nothing is
recounted. One anneal is a sequential chain in one thread. The steps are spent in restarts of growing length
(``ROUND_SHARES``), up to ``threads`` of them at once; the earliest restart that meets the goal wins, so the
result depends on the seed, never on the thread count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numba
import numpy as np

from stages.kits.partition.bound import infeasible_statement, remote_lower_bound
from stages.kits.partition.graph import Graphs
from stages.kits.partition.metrics import remote_sizes
from stages.strategies.g3.repartition import Algorithm1Result, CountedAssignment, move_counts

# cost of one remote node above the budget, per phase: the descend phase may cross the budget for a while; in
# the level phase it outweighs any gain in the min/max gap
OVER_BUDGET_WEIGHT = (10.0, 100.0)
DESCEND_NORM = 4.0  # the descend phase minimises ||R||_4: every set counts, the largest most
LEVEL_ALPHA = 20.0  # weight of the min/max gap during the level phase
DESCEND_SHARE = 2.0 / 3.0  # share of the steps spent in the descend phase
DESCEND_T = (2e-2, 1e-4)  # temperatures of each phase, as fractions of the mean remote set at the start
LEVEL_T = (1e-3, 5e-5)
BOUNDARY_EVERY = 20_000  # steps between rebuilds of the boundary-node list
STEPS_PER_CALL = 2_000_000  # steps between progress updates
STEPS_PER_NODE = 1000  # default number of steps: this many per node
# shares of the steps per round: restarts of growing length. A short anneal often meets the goal already (cnr-2000
# at K = 4, seed 0: 5 of 8 generator seeds with 1 % of the steps, about 1 s instead of 38 s); where it takes
# longer (seed 5: 100 x N steps missed with every generator seed tried), the last round is a long one
ROUND_SHARES: tuple[float, ...] = (0.01, 0.01, 0.01, 0.01, 0.1, 0.86)
# default when the lower bound proves the budget infeasible: the goal cannot be met, and on cnr-2000 the steps
# past this many changed the largest remote set by under 1 % and the total by under 6 % (docs/BENCHMARKS.md)
STEPS_PER_NODE_INFEASIBLE = 100


# rounds run in threads; numba's counting kernels (prange) are launched one at a time, since its fallback
# threading layer (workqueue, where neither TBB nor OpenMP is present) cannot take launches from two threads
_PARALLEL_KERNELS = threading.Lock()


@dataclass
class RefineResult:
    part: np.ndarray
    converged: bool  # min/max >= 1 - gamma with the total within the budget
    steps: int  # steps taken over all rounds (a step is one proposed move, refused ones included)
    accepted: int  # moves kept
    seconds: float
    initial_remote: list[int]
    final_remote: list[int]
    rounds: list[dict] = field(default_factory=list)  # per round: steps planned and taken, outcome


@numba.njit(cache=True)
def refine_cost(remote, norm_p, alpha, gamma, budget, over_weight):
    mx = remote.max()
    mn = remote.min()
    total = remote.sum()
    size = float(mx)
    if norm_p > 0 and mx > 0:
        acc = 0.0
        for r in remote:
            acc += (r / mx) ** norm_p
        size = mx * acc ** (1.0 / norm_p)  # ||R||_p, scaled to avoid overflow
    return size + alpha * max(0.0, (1.0 - gamma) * mx - mn) + over_weight * max(0.0, total - budget)


@numba.njit(cache=True)
def _goal_met(remote, gamma, budget):
    return remote.min() >= (1.0 - gamma) * remote.max() and remote.sum() <= budget


@numba.njit(cache=True)
def _boundary(part, nb_cnt, deg, out):
    m = 0
    for v in range(len(part)):
        if nb_cnt[v, part[v]] < deg[v]:
            out[m] = v
            m += 1
    return m


@numba.njit(cache=True)
def _catch_up(best_part, part, journal, counters):
    """Make ``best_part`` the current assignment: copy the nodes moved since it was taken (``journal``), or
    everything if more moved than the journal holds. Amortised O(1) per kept move, not O(N) per new best."""
    m = counters[2]
    if m < 0:
        best_part[:] = part
    else:
        for t in range(m):
            best_part[journal[t]] = part[journal[t]]
    counters[2] = 0


@numba.njit(cache=True, nogil=True)
def anneal(
    first,
    last,
    phase_steps,
    norm_p,
    alpha,
    over_weight,
    t_hi,
    t_lo,
    G,
    S,
    shared,
    node_cnt,
    node_limit,
    deg_limit,
    gamma,
    budget,
    best_part,
    best,
    counters,
    boundary,
    journal,
):
    """Steps ``first .. last - 1`` of a phase of ``phase_steps`` steps cooling from ``t_hi`` to ``t_lo``.

    Returns (best cost, goal met); ``best_part`` holds the best assignment and ``journal`` the nodes moved since
    it was taken. ``counters`` = [steps taken, moves kept, journal length (-1: overflowed)]. The generator is
    numba's, seeded once by the caller."""
    indptr, indices, sym_indptr, sym_indices, deg = G
    part, arc_cnt, nb_cnt, remote, deg_sum = S
    current = refine_cost(remote, norm_p, alpha, gamma, budget, over_weight)
    nb = 0
    for s in range(first, last):
        if (s - first) % BOUNDARY_EVERY == 0:
            nb = _boundary(part, nb_cnt, deg, boundary)
            if nb == 0:
                return best, False
        counters[0] += 1
        temperature = t_hi * (t_lo / t_hi) ** (s / phase_steps)
        w = boundary[np.random.randint(nb)]
        a = np.int64(part[w])  # node and part ids as int64 at every call: one compiled version of each callee
        b = np.int64(part[sym_indices[sym_indptr[w] + np.random.randint(sym_indptr[w + 1] - sym_indptr[w])]])
        if b == a or node_cnt[b] + 1 > node_limit or deg_sum[b] + deg[w] > deg_limit:
            continue
        move_counts(w, a, b, G, S, shared)
        c = refine_cost(remote, norm_p, alpha, gamma, budget, over_weight)
        if c <= current or np.random.random() < np.exp((current - c) / temperature):
            current = c
            node_cnt[a] -= 1
            node_cnt[b] += 1
            counters[1] += 1
            m = counters[2]
            if 0 <= m < len(journal):
                journal[m] = w
                counters[2] = m + 1
            else:
                counters[2] = -1
            if c < best:
                best = c
                _catch_up(best_part, part, journal, counters)
            if _goal_met(remote, gamma, budget):
                _catch_up(best_part, part, journal, counters)
                return best, True
        else:
            move_counts(w, b, a, G, S, shared)
    return best, False


@numba.njit(cache=True)
def seed_anneal(seed):
    np.random.seed(seed)


class AnnealChain(CountedAssignment):
    """The annealing state of one assignment: Algorithm 1's counters plus node counts (no priority queues)."""

    def __init__(self, graphs: Graphs, part: np.ndarray, k: int):
        super().__init__(graphs, part, k)
        self.node_cnt = np.bincount(self.part, minlength=k).astype(np.int64)


def run_refine(
    graphs: Graphs,
    part: np.ndarray,
    k: int,
    gamma: float,
    balance_tol: float,
    degree_tol: float,
    budget: float,
    steps: int | None = None,
    seed: int = 0,
    on_progress: Callable[[int, int, list[int]], None] | None = None,
    round_shares: tuple[float, ...] = ROUND_SHARES,
    threads: int = 1,
) -> RefineResult:
    """Anneal ``part`` towards ``min/max remote >= 1 - gamma`` with ``sum remote <= budget``.

    The anneal is restarted in rounds: round ``r`` is a whole anneal (both phases, its own cooling schedule) of
    ``round_shares[r] x steps`` steps from ``part`` (``steps`` defaults to ``STEPS_PER_NODE x N``), with a
    generator seeded from ``(seed, r)``. The earliest round that meets the goal wins; where none does, the round
    whose best assignment has the lowest level-phase cost (the later one on a tie). Up to ``threads`` rounds run
    at once; a round is cancelled once an earlier one has met the goal, so the outcome does not depend on
    ``threads``, only the wall time does. ``on_progress(steps done, steps in all, remote sizes)`` is called
    between batches, from the threads running the rounds."""
    t0 = time.perf_counter()
    n = graphs.num_nodes
    steps = STEPS_PER_NODE * n if steps is None else int(steps)
    chain = AnnealChain(graphs, part, k)
    initial = chain.remote.tolist()
    met = bool(_goal_met(chain.remote, gamma, budget))
    if k == 1 or met or steps <= 0:
        return RefineResult(chain.part, met, 0, 0, time.perf_counter() - t0, initial, initial)
    # a partition already above a limit may not grow; the others may grow up to the limit
    limits = (
        max(balance_tol * n / k, float(chain.node_cnt.max())),
        max(degree_tol * float(chain.S[4].sum()) / k, float(chain.S[4].max())),
    )
    del chain
    sizes = [int(share * steps) for share in round_shares[:-1]]
    sizes = [size for size in sizes + [steps - sum(sizes)] if size > 0]  # the last round takes the rest
    results = _run_rounds(graphs, part, k, gamma, limits, budget, sizes, seed, on_progress, threads)
    return _outcome(results, sizes, gamma, budget, t0, initial)


def _run_rounds(graphs, part, k, gamma, limits, budget, sizes, seed, on_progress, threads) -> list:
    """Every round's result (None: skipped), each cancelled once an earlier round has met the goal."""
    done = [0] * len(sizes)
    winner = [len(sizes)]  # the earliest round that met the goal so far; -1 stops every round
    lock = threading.Lock()

    def run_round(number: int) -> RefineResult | None:
        if winner[0] < number:
            return None  # an earlier round met the goal: this one cannot win

        def report(steps_done: int, remote: list[int]) -> None:
            with lock:
                done[number] = steps_done
                total_done = sum(done)
            if on_progress is not None:
                on_progress(total_done, sum(sizes), remote)

        seed_of_round = int(np.random.SeedSequence([seed, number]).generate_state(1)[0])
        result = _anneal_round(
            graphs,
            part,
            k,
            gamma,
            limits,
            budget,
            sizes[number],
            seed_of_round,
            report,
            lambda: winner[0] < number,
        )
        if result.converged:
            with lock:
                winner[0] = min(winner[0], number)
        return result

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(sizes)))) as pool:
            results = list(pool.map(run_round, range(len(sizes))))
    finally:
        winner[0] = -1  # on an error or an interrupt, rounds still running stop at their next batch
    return results


def _outcome(
    results: list[RefineResult | None], sizes: list[int], gamma: float, budget: float, t0: float, initial
) -> RefineResult:
    """The refinement's outcome: the winning round's assignment, with the steps and moves of the rounds kept."""
    # rounds after the winner (the earliest to meet the goal) may be partial or skipped (None); the rest ran
    won = next((i for i, r in enumerate(results) if r is not None and r.converged), len(results) - 1)
    kept = [r for r in results[: won + 1] if r is not None]
    best = _pick_round(kept, gamma, budget)
    rounds = [
        {"steps": size, "taken": r.steps, "converged": r.converged, "remote_after": r.final_remote}
        for size, r in zip(sizes[: len(kept)], kept, strict=True)
    ]
    return RefineResult(
        best.part,
        best.converged,
        sum(r.steps for r in kept),
        sum(r.accepted for r in kept),
        time.perf_counter() - t0,
        initial,
        best.final_remote,
        rounds,
    )


def _pick_round(results: list[RefineResult], gamma: float, budget: float) -> RefineResult:
    """The round that met the goal (the last of ``results`` if any did), else the lowest level-phase cost."""
    if results[-1].converged:
        return results[-1]
    costs = [
        refine_cost(np.asarray(r.final_remote), 0.0, LEVEL_ALPHA, gamma, budget, OVER_BUDGET_WEIGHT[1])
        for r in results
    ]
    return results[max(i for i, c in enumerate(costs) if c == min(costs))]


def _anneal_round(
    graphs: Graphs,
    part: np.ndarray,
    k: int,
    gamma: float,
    limits: tuple[float, float],
    budget: float,
    steps: int,
    seed: int,
    report: Callable[[int, list[int]], None],
    cancelled: Callable[[], bool],
) -> RefineResult:
    """One anneal of ``steps`` steps from ``part``: the descend phase, then the level phase from the descend
    phase's best. Returns the best assignment of the level phase (or the one that met the goal). The whole
    round runs in the calling thread: numba's generator state is per thread, seeded here."""
    t0 = time.perf_counter()
    n = graphs.num_nodes
    with _PARALLEL_KERNELS:
        chain = AnnealChain(graphs, part, k)
    initial = chain.remote.tolist()
    node_limit, deg_limit = limits
    scale = max(1.0, float(chain.remote.mean()))  # temperatures follow the size of the remote sets
    descend = int(steps * DESCEND_SHARE)
    phases = [
        (descend, DESCEND_NORM, 0.0, OVER_BUDGET_WEIGHT[0], DESCEND_T),
        (steps - descend, 0.0, LEVEL_ALPHA, OVER_BUDGET_WEIGHT[1], LEVEL_T),
    ]
    counters = np.zeros(3, dtype=np.int64)
    boundary = np.empty(n, dtype=np.int64)
    journal = np.empty(n, dtype=np.int64)
    seed_anneal(seed)
    converged, offset = False, 0
    best_part = chain.part.copy()
    for number, (phase_steps, norm_p, alpha, over_weight, (t_hi, t_lo)) in enumerate(phases):
        if number > 0:  # the next phase starts from the best assignment so far, counted afresh
            with _PARALLEL_KERNELS:
                chain = AnnealChain(graphs, best_part, k)
            best_part = chain.part.copy()
            counters[2] = 0
        best = refine_cost(chain.remote, norm_p, alpha, gamma, budget, over_weight)
        done = 0
        while done < phase_steps and not converged:
            if cancelled():
                break
            last = min(phase_steps, done + STEPS_PER_CALL)
            best, converged = anneal(
                done,
                last,
                phase_steps,
                norm_p,
                alpha,
                over_weight,
                scale * t_hi,
                scale * t_lo,
                chain.G,
                chain.S,
                graphs.symmetric,
                chain.node_cnt,
                node_limit,
                deg_limit,
                float(gamma),
                float(budget),
                best_part,
                best,
                counters,
                boundary,
                journal,
            )
            done = last
            report(offset + done, chain.remote.tolist())
        offset += phase_steps
        if converged:
            break
    with _PARALLEL_KERNELS:
        final = remote_sizes(graphs.indptr, graphs.indices, best_part, k)  # recounted, apart from the chain
    return RefineResult(
        best_part,
        bool(_goal_met(final, gamma, budget)),
        int(counters[0]),
        int(counters[1]),
        time.perf_counter() - t0,
        initial,
        final.tolist(),
    )


def needs_refinement(result: Algorithm1Result, remote_budget: float) -> bool:
    """Algorithm 1 stopped short of 1 - gamma, or reached it by raising the total remote above
    ``remote_budget x`` its start's (the balance was bought with communication). Otherwise plain METIS is not
    consulted: its extra call would cost as much as stage 1 on a large graph."""
    if result.stop_reason in ("stalled", "cycle", "swap limit"):
        return True
    return sum(result.final_remote) > remote_budget * sum(result.initial_remote)


def refine_after_algorithm1(
    graphs: Graphs, result: Algorithm1Result, o, timing: dict, progress
) -> tuple[np.ndarray, dict]:
    """`g3 partition`'s stage 3: anneal Algorithm 1's assignment within ``o.remote_budget x`` plain METIS's total
    (``o``: the PartitionOptions). Returns the assignment to keep and partition.json's ``refine`` block.

    A refinement that misses the goal replaces Algorithm 1's assignment only if that one missed the ratio too
    and the refinement is no worse (``_no_worse``): g3's first promise is balanced remote sets."""
    from stages.kits.partition.metis import metis_partition

    k = o.workers
    t0 = time.perf_counter()
    task = progress.add_task("METIS (edge-cut: the refinement's budget)", total=None)
    reference = int(remote_sizes(graphs.indptr, graphs.indices, metis_partition(graphs, k, o.seed), k).sum())
    progress.update(task, total=1, completed=1)
    timing["metis_reference"] = time.perf_counter() - t0
    budget = o.remote_budget * reference
    t0 = time.perf_counter()
    bound = _lower_bound_entry(graphs, k, o.degree_limit, budget)  # first, so the progress line can say it
    timing["lower_bound"] = time.perf_counter() - t0
    note = ", budget infeasible" if bound["exceeds_budget"] else ""
    task = progress.add_task(f"refining (annealing{note})", total=None)

    steps, shares = o.refine_steps, ROUND_SHARES
    if bound["exceeds_budget"]:  # the goal cannot be met: no early stop to hope for, one long anneal
        shares = (1.0,)
        if steps is None:
            steps = STEPS_PER_NODE_INFEASIBLE * graphs.num_nodes
    res = run_refine(
        graphs,
        result.part,
        k,
        o.gamma,
        o.balance_tol,
        o.degree_limit,
        budget,
        steps,
        o.seed,
        _progress_line(progress, task, reference, note),
        shares,
        numba.get_num_threads(),
    )
    progress.update(task, total=max(1, res.steps), completed=max(1, res.steps))
    timing["refine"] = res.seconds
    ratio_met = result.stop_reason == "converged"
    keep = res.converged or (not ratio_met and _no_worse(res.final_remote, res.initial_remote, budget))
    return (res.part if keep else result.part), {
        "converged": res.converged,
        "kept": "refined" if keep else "algorithm1",
        "explanation": _explanation(res.converged, keep, ratio_met, bound, budget),
        "metis_total_remote": reference,
        "remote_budget": o.remote_budget,
        "budget": round(budget, 3),
        "steps": res.steps,
        "accepted_moves": res.accepted,
        "rounds": res.rounds,
        "remote_before": res.initial_remote,
        "remote_after": res.final_remote,
        "lower_bound": bound,
    }


def _progress_line(progress, task, reference: int, note: str) -> Callable[[int, int, list[int]], None]:
    """The refinement's ``on_progress``: the steps done and the remote sets' min/max and total on its line."""

    def on_progress(done: int, steps: int, remote: list[int]) -> None:
        progress.update(
            task,
            total=steps,
            completed=done,
            description=(
                f"refining (min/max remote {min(remote) / max(1, max(remote)):.4f}, total {sum(remote) / reference:.3f}"
                f" x METIS{note})"
            ),
        )

    return on_progress


def _explanation(converged: bool, keep: bool, ratio_met: bool, bound: dict, budget: float) -> str:
    """partition.json's ``refine.explanation``: why the refined or Algorithm 1's assignment is kept."""
    if converged:
        explanation = "min/max remote set ratio reached 1 - gamma with the total remote within the budget"
    elif keep:
        explanation = (
            "the steps ran out before the goal; the refined assignment is kept: its largest remote "
            "set is smaller and its total within the budget or below Algorithm 1's"
        )
    else:
        explanation = "the steps ran out before the goal; Algorithm 1's assignment is kept: " + (
            "it met the min/max ratio"
            if ratio_met
            else "the refinement did not shrink the largest remote set within the budget"
        )
    if bound["exceeds_budget"]:
        explanation += "; " + infeasible_statement(bound, budget)
    return explanation


def _lower_bound_entry(graphs: Graphs, k: int, degree_tol: float, budget: float) -> dict:
    """partition.json's ``refine.lower_bound``: the hub-block bound on the total remote set under the degree
    limit (bound.py), whether it exceeds the budget and the degree tolerance the budget needs at least."""
    bound = remote_lower_bound(graphs, k, degree_tol)
    exceeds = bound.total > budget
    return {
        **bound.as_dict(),
        "exceeds_budget": bool(exceeds),
        "degree_tol_needed": bound.degree_tol_needed(budget, float(k)) if exceeds else None,
    }


def _no_worse(refined: list[int], start: list[int], budget: float) -> bool:
    """A refinement that missed the goal is kept only if it shrinks the largest remote set (what the slowest
    worker receives) without raising the total above both the budget and the start's total."""
    return max(refined) < max(start) and sum(refined) <= max(budget, sum(start))


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)
