"""`g3 eval`: exact full-neighbour inference of a run's weights with the run's strategy (:mod:`.run`)."""

from stages.eval.run import SPLITS, EvalOptions, pick_weights, read_weights, run_eval, run_plan_path
