"""The g3 strategy."""

from stages.strategies.g3.spec import SPEC

__all__ = ["SPEC"]
