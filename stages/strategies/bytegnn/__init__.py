"""The bytegnn strategy."""

from stages.strategies.bytegnn.spec import SPEC

__all__ = ["SPEC"]
