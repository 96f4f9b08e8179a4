"""HopGNN (paper 004, published as LeapGNN): the model migrates to the features.

- ``plan.py`` — distdgl's sampling options and HopGNN's (``--pregather``, ``--merge``, ``--migrate``,
  ``--batch-order``).
- ``runtime.py`` — §4: each global batch as per-root micrographs trained in K time steps on their home servers,
  the model migrating between them; §5: pre-gathering and merging.
- ``simulate.py`` — its iteration (K time steps, migrations) from a run's rates.
"""
