"""The peer runners of `g3 bench`: scripts run as subprocesses by another Python (PyG in g3's environment, DGL in
``.venv-dgl``), reading the neutral graph file and printing one JSON line. They import only numpy, torch and
the peer (never g3), so they live here as files, run by path (``stages.bench.PEERS_DIR``)."""
