"""Click callbacks shared by the commands: an option's text read by a parser of the bottom layer."""

from __future__ import annotations

import click


def parsed(parse, missing=None):
    """A click callback reading an option's text with ``parse`` (an option not given is ``missing``; a repeatable
    option's texts reach ``parse`` as a tuple, none given as ``()``); its ValueError becomes click's one-line
    usage error naming the option (exit 2)."""

    def callback(ctx, param, value):
        if value is None:
            return missing
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback
