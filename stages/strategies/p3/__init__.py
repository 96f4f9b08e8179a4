"""The p3 strategy."""

from stages.strategies.p3.spec import SPEC

__all__ = ["SPEC"]
