"""The simulate engine: the discrete-event engine and its network, the work of a plan, compute rates, and the
calibrated model of a sampling strategy's step, shared by the strategies' simulators."""
