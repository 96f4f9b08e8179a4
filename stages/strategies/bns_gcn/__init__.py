"""The bns_gcn strategy."""

from stages.strategies.bns_gcn.spec import SPEC

__all__ = ["SPEC"]
