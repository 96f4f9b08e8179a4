"""The clustergcn strategy."""

from stages.strategies.clustergcn.spec import SPEC

__all__ = ["SPEC"]
