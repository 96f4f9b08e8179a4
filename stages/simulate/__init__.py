"""`g3 simulate PLAN`: a discrete-event simulation of one training epoch on K workers (:mod:`.run`)."""

from stages.kits.simulate.engine import Network
from stages.kits.simulate.network import allreduce_seconds, parse_bandwidth, parse_latency, parse_workers_list
from stages.kits.simulate.options import SimulateOptions
from stages.simulate.report import print_simulation
from stages.simulate.run import SIM_SCHEMA, SIM_VERSION, run_simulate, simulate_plan
