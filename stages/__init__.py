"""g3 pipeline stages: each subpackage is one stage with one entry function the CLI calls."""
