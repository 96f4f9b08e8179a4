"""`g3 train`: distributed full-graph (or mini-batch) training of a plan with the plan's strategy."""

from stages.train.run import RUN_SCHEMA, RUN_VERSION, TrainConfig, check_plan, run_train
