"""The strategies: one package per distributed training system, and the registry that lists them.

A strategy's package holds everything that is that system: its spec, planner, runtime, simulator and, where it
has one, its partitioner (docs/DESIGN.md, "A strategy folder"). Its ``SPEC`` (:class:`~.spec.StrategySpec`) holds
that code as callables and its options as typed declarations; every stage asks the registry
(:mod:`.registry`) for a spec by name and calls it. Adding a strategy is one package and one name below.
"""

from stages.strategies.bns_gcn import spec as bns_gcn
from stages.strategies.bytegnn import spec as bytegnn
from stages.strategies.clustergcn import spec as clustergcn
from stages.strategies.distdgl import spec as distdgl
from stages.strategies.g3 import spec as g3
from stages.strategies.hopgnn import spec as hopgnn
from stages.strategies.neutrontp import spec as neutrontp
from stages.strategies.p3 import spec as p3
from stages.strategies.registry import register
from stages.strategies.sancus import spec as sancus

# the order `g3 plan --help` lists them in
register(g3, bns_gcn, sancus, distdgl, bytegnn, neutrontp, clustergcn, p3, hopgnn)
