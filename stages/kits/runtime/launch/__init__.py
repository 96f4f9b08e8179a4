"""Where a run's workers run and how they start: K local processes (``processes``: spawning, the fork server's
preloads, failures named per worker), the launchers that choose between them (``launchers``), and emulated hosts
joined by shaped links (``emulated_hosts`` over ``netemu``'s namespaces, each host a torchrun agent running
``host_worker``)."""
