"""The neutrontp strategy."""

from stages.strategies.neutrontp.spec import SPEC

__all__ = ["SPEC"]
