"""`g3 bench STORE`: training strategies side by side, next to DGL and PyG, on the same graph and model."""

from stages.bench.report import print_bench
from stages.bench.run import BenchOptions, run_bench
