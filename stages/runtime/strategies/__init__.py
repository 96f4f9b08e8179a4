"""Training strategies: one module per distributed system, each exporting ``STRATEGY`` (a subclass of
``base.Strategy``); ``stages.common.strategies`` registers them with their planners."""
