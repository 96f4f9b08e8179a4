"""The hopgnn strategy."""

from stages.strategies.hopgnn.spec import SPEC

__all__ = ["SPEC"]
