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
recounted. Steps run in one thread (the chain is sequential); a seeded generator makes the run reproducible.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

from .bound import infeasible_statement, remote_lower_bound
from .g3 import Algorithm1Result, CountedAssignment, move_counts
from .graph import Graphs
from .metrics import remote_sizes

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
# default when the lower bound proves the budget infeasible: the goal cannot be met, and on cnr-2000 the steps
# past this many changed the largest remote set by under 1 % and the total by under 6 % (docs/BENCHMARKS.md)
STEPS_PER_NODE_INFEASIBLE = 100


@dataclass
class RefineResult:
    part: np.ndarray
    converged: bool  # min/max >= 1 - gamma with the total within the budget
    steps: int  # steps taken (a step is one proposed move, refused ones included)
    accepted: int  # moves kept
    seconds: float
    initial_remote: list[int]
    final_remote: list[int]


@numba.njit(cache=True)
def _cost(remote, norm_p, alpha, gamma, budget, over_weight):
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


@numba.njit(cache=True)
def _anneal(first, last, phase_steps, norm_p, alpha, over_weight, t_hi, t_lo, G, S, shared, node_cnt, node_limit,
            deg_limit, gamma, budget, best_part, best, counters, boundary, journal):
    """Steps ``first .. last - 1`` of a phase of ``phase_steps`` steps cooling from ``t_hi`` to ``t_lo``.

    Returns (best cost, goal met); ``best_part`` holds the best assignment and ``journal`` the nodes moved since
    it was taken. ``counters`` = [steps taken, moves kept, journal length (-1: overflowed)]. The generator is
    numba's, seeded once by the caller."""
    indptr, indices, sym_indptr, sym_indices, deg = G
    part, arc_cnt, nb_cnt, remote, deg_sum = S
    current = _cost(remote, norm_p, alpha, gamma, budget, over_weight)
    nb = 0
    for s in range(first, last):
        if (s - first) % BOUNDARY_EVERY == 0:
            nb = _boundary(part, nb_cnt, deg, boundary)
            if nb == 0:
                return best, False
        counters[0] += 1
        temperature = t_hi * (t_lo / t_hi) ** (s / phase_steps)
        w = boundary[np.random.randint(nb)]
        a = part[w]
        b = part[sym_indices[sym_indptr[w] + np.random.randint(sym_indptr[w + 1] - sym_indptr[w])]]
        if b == a or node_cnt[b] + 1 > node_limit or deg_sum[b] + deg[w] > deg_limit:
            continue
        move_counts(w, a, b, G, S, shared)
        c = _cost(remote, norm_p, alpha, gamma, budget, over_weight)
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
def _seed(seed):
    np.random.seed(seed)


class _Chain(CountedAssignment):
    """The annealing state of one assignment: Algorithm 1's counters plus node counts (no priority queues)."""

    def __init__(self, graphs: Graphs, part: np.ndarray, k: int):
        super().__init__(graphs, part, k)
        self.node_cnt = np.bincount(self.part, minlength=k).astype(np.int64)


def run_refine(graphs: Graphs, part: np.ndarray, k: int, gamma: float, balance_tol: float, degree_tol: float,
               budget: float, steps: int | None = None, seed: int = 0,
               on_progress: Callable[[int, int, list[int]], None] | None = None) -> RefineResult:
    """Anneal ``part`` towards ``min/max remote >= 1 - gamma`` with ``sum remote <= budget``.

    ``steps`` (both phases) defaults to ``STEPS_PER_NODE x N``. ``on_progress(steps done, steps in all,
    remote sizes)`` is called between batches. Returns the best assignment of the level phase, which starts
    from the best of the descend phase (or the assignment that met the goal, which ends the run)."""
    t0 = time.perf_counter()
    n = graphs.num_nodes
    steps = STEPS_PER_NODE * n if steps is None else int(steps)
    chain = _Chain(graphs, part, k)
    initial = chain.remote.tolist()
    deg_sum = chain.S[4]
    # a partition already above a limit may not grow; the others may grow up to the limit
    node_limit = max(balance_tol * n / k, float(chain.node_cnt.max()))
    deg_limit = max(degree_tol * float(deg_sum.sum()) / k, float(deg_sum.max()))
    if k == 1 or _goal_met(chain.remote, gamma, budget) or steps <= 0:
        return RefineResult(chain.part, bool(_goal_met(chain.remote, gamma, budget)), 0, 0,
                            time.perf_counter() - t0, initial, initial)
    scale = max(1.0, float(chain.remote.mean()))  # temperatures follow the size of the remote sets
    descend = int(steps * DESCEND_SHARE)
    phases = [(descend, DESCEND_NORM, 0.0, OVER_BUDGET_WEIGHT[0], DESCEND_T),
              (steps - descend, 0.0, LEVEL_ALPHA, OVER_BUDGET_WEIGHT[1], LEVEL_T)]
    counters = np.zeros(3, dtype=np.int64)
    boundary = np.empty(n, dtype=np.int64)
    journal = np.empty(n, dtype=np.int64)
    _seed(seed)
    converged, offset = False, 0
    best_part = chain.part.copy()
    for number, (phase_steps, norm_p, alpha, over_weight, (t_hi, t_lo)) in enumerate(phases):
        if number > 0:  # the next phase starts from the best assignment so far, counted afresh
            chain = _Chain(graphs, best_part, k)
            best_part = chain.part.copy()
            counters[2] = 0
        best = _cost(chain.remote, norm_p, alpha, gamma, budget, over_weight)
        done = 0
        while done < phase_steps and not converged:
            last = min(phase_steps, done + STEPS_PER_CALL)
            best, converged = _anneal(done, last, phase_steps, norm_p, alpha, over_weight, scale * t_hi,
                                      scale * t_lo, chain.G, chain.S, graphs.symmetric, chain.node_cnt,
                                      node_limit, deg_limit, float(gamma), float(budget), best_part, best,
                                      counters, boundary, journal)
            done = last
            if on_progress is not None:
                on_progress(offset + done, steps, chain.remote.tolist())
        offset += phase_steps
        if converged:
            break
    final = remote_sizes(graphs.indptr, graphs.indices, best_part, k)  # recounted, independent of the chain
    return RefineResult(best_part, bool(_goal_met(final, gamma, budget)), int(counters[0]), int(counters[1]),
                        time.perf_counter() - t0, initial, final.tolist())


def needs_refinement(result: Algorithm1Result, remote_budget: float) -> bool:
    """Algorithm 1 stopped short of 1 - gamma, or reached it by raising the total remote above
    ``remote_budget x`` its start's (the balance was bought with communication). Otherwise plain METIS is not
    consulted: its extra call would cost as much as stage 1 on a large graph."""
    if result.stop_reason in ("stalled", "cycle", "swap limit"):
        return True
    return sum(result.final_remote) > remote_budget * sum(result.initial_remote)


def refine_after_algorithm1(graphs: Graphs, result: Algorithm1Result, o, timing: dict,
                            progress) -> tuple[np.ndarray, dict]:
    """`g3 partition`'s stage 3: anneal Algorithm 1's assignment within ``o.remote_budget x`` plain METIS's total
    (``o``: the PartitionOptions). Returns the assignment to keep and partition.json's ``refine`` block.

    A refinement that misses the goal replaces Algorithm 1's assignment only if that one missed the ratio too
    and the refinement is no worse (``_no_worse``): g3's first promise is balanced remote sets."""
    from .metis import metis_partition

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

    def on_progress(done: int, steps: int, remote: list[int]) -> None:
        progress.update(task, total=steps, completed=done, description=(
            f"refining (min/max remote {min(remote) / max(1, max(remote)):.4f}, total {sum(remote) / reference:.3f}"
            f" x METIS{note})"))

    steps = o.refine_steps
    if steps is None and bound["exceeds_budget"]:
        steps = STEPS_PER_NODE_INFEASIBLE * graphs.num_nodes
    res = run_refine(graphs, result.part, k, o.gamma, o.balance_tol, o.degree_limit, budget, steps, o.seed,
                     on_progress)
    progress.update(task, total=max(1, res.steps), completed=max(1, res.steps))
    timing["refine"] = res.seconds
    ratio_met = result.stop_reason == "converged"
    keep = res.converged or (not ratio_met and _no_worse(res.final_remote, res.initial_remote, budget))
    if res.converged:
        explanation = "min/max remote set ratio reached 1 - gamma with the total remote within the budget"
    elif keep:
        explanation = ("the steps ran out before the goal; the refined assignment is kept: its largest remote "
                       "set is smaller and its total within the budget or below Algorithm 1's")
    else:
        explanation = ("the steps ran out before the goal; Algorithm 1's assignment is kept: "
                       + ("it met the min/max ratio" if ratio_met else
                          "the refinement did not shrink the largest remote set within the budget"))
    if bound["exceeds_budget"]:
        explanation += "; " + infeasible_statement(bound, budget)
    return (res.part if keep else result.part), {
        "converged": res.converged,
        "kept": "refined" if keep else "algorithm1",
        "explanation": explanation,
        "metis_total_remote": reference,
        "remote_budget": o.remote_budget,
        "budget": round(budget, 3),
        "steps": res.steps,
        "accepted_moves": res.accepted,
        "remote_before": res.initial_remote,
        "remote_after": res.final_remote,
        "lower_bound": bound,
    }


def _lower_bound_entry(graphs: Graphs, k: int, degree_tol: float, budget: float) -> dict:
    """partition.json's ``refine.lower_bound``: the hub-block bound on the total remote set under the degree
    limit (bound.py), whether it exceeds the budget and the degree tolerance the budget needs at least."""
    bound = remote_lower_bound(graphs, k, degree_tol)
    exceeds = bound.total > budget
    return {**bound.as_dict(), "exceeds_budget": bool(exceeds),
            "degree_tol_needed": bound.degree_tol_needed(budget, float(k)) if exceeds else None}


def _no_worse(refined: list[int], start: list[int], budget: float) -> bool:
    """A refinement that missed the goal is kept only if it shrinks the largest remote set (what the slowest
    worker receives) without raising the total above both the budget and the start's total."""
    return max(refined) < max(start) and sum(refined) <= max(budget, sum(start))
