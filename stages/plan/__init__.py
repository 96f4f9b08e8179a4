"""`g3 plan`: how a strategy will execute a partition, written to disk (one JSON plus one folder per worker)."""

from stages.plan.run import (
    MODELS,
    PLAN_SCHEMA,
    PLAN_VERSION,
    PlanConfig,
    default_out,
    parse_options,
    run_plan,
)
