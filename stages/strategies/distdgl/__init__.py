"""The distdgl strategy."""

from stages.strategies.distdgl.spec import SPEC

__all__ = ["SPEC"]
