"""`g3 plan` options of a strategy, declared once each (:class:`PlanOption`), with their shared parsers.

A strategy's spec lists its options (``StrategySpec.plan_options``); `g3 plan`'s command-line options and help,
plan.json's ``strategy.options`` and the check of a plan's recorded options come from these declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class PlanOption:
    """One ``g3 plan`` option of a strategy. ``parse(text)`` turns the command-line text into the value kept in
    plan.json (a ValueError's message becomes the one-line error); ``default`` is that value's text form."""

    name: str  # key in plan.json's strategy options
    flag: str  # the command-line flag
    default: str | None
    help: str
    parse: Callable[[str], object] = str
    metavar: str = "VALUE"
    # False: the option changes only what plan.json records, not how a run of the plan computes or moves data
    # (``g3 advise`` then reuses one calibration run across its values)
    layout: bool = True


def positive_int(what: str, unit: str = "", auto: bool = False) -> Callable[[str], int | None]:
    """A :class:`PlanOption` parser of an integer >= 1 (``what`` names it in the error, ``unit`` follows the 1);
    with ``auto``, also ``auto`` (None)."""

    def parse(text: str) -> int | None:
        if auto and text in (None, "auto"):
            return None
        try:
            value = int(text)
        except ValueError:
            raise ValueError(
                "expected a node count or 'auto'" if auto else "expected a positive integer"
            ) from None
        if value < 1:
            raise ValueError(f"{what} must be at least 1{unit}")
        return value

    return parse


def count_or_auto(what: str) -> Callable[[str], int | None]:
    """A :class:`PlanOption` parser of a node count >= 1 or ``auto`` (None); ``what`` names it in the error."""
    return positive_int(what, " node", auto=True)


def one_of(*choices: str) -> Callable[[str], str]:
    """A :class:`PlanOption` parser of one of ``choices`` (kept as the text)."""

    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected {', '.join(choices[:-1])} or {choices[-1]}")
        return text

    return parse


def on_off(text: str) -> bool:
    """A :class:`PlanOption` parser of on | off (kept as a bool)."""
    if text not in ("on", "off"):
        raise ValueError("expected on or off")
    return text == "on"


def choice_option(name: str, default: str, choices: tuple[str, ...], help: str, **more) -> PlanOption:
    """A `g3 plan` option ``--name`` taking one of ``choices``; ``("on", "off")`` is kept as a bool."""
    parse = on_off if choices == ("on", "off") else one_of(*choices)
    return PlanOption(
        name, "--" + name.replace("_", "-"), default, help, parse=parse, metavar="|".join(choices), **more
    )
