"""Kits: what every strategy builds on and no strategy owns (the runtime engine, the plan kit, the simulate engine,
the partition machinery). A kit never imports a strategy (``.importlinter``)."""
