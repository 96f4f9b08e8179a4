"""The sancus strategy."""

from stages.strategies.sancus.spec import SPEC

__all__ = ["SPEC"]
