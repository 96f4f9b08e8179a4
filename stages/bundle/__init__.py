"""`g3 bundle PLAN --nodes N`: one self-contained folder per host of a multi-host run, nothing shared."""

from stages.bundle.run import BUNDLE_SCHEMA, BUNDLE_VERSION, host_folders, node_name, run_bundle
