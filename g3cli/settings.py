"""Command-line options made from the settings of a stage's options dataclass (``stages.common.settings.setting``):
the option's flag, type, default and help come from the field, so an option is declared once, beside the code
that reads it."""

from __future__ import annotations

import dataclasses
import types
import typing

import click

from g3cli.paths import OutputPath
from g3cli.values import parsed


def _option_type(hint):
    """(the click type of one value, whether the option repeats) for a field's type."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True
    return hint, False


def setting_option(f: dataclasses.Field, hint):
    """The click option decorator of one setting."""
    meta = f.metadata["setting"]
    flag = meta["flag"] or "--" + f.name.replace("_", "-")
    decls = [flag, f.name] if meta["short"] is None else [meta["short"], flag, f.name]
    kind, multiple = _option_type(hint)
    required = f.default is dataclasses.MISSING
    default = None if required else f.default
    if kind is bool:
        if default is None or default:  # on by default, or undecided (None): turned on or off by name
            decls = [f"{flag}/--no-{flag[2:]}", f.name]
            return click.option(*decls, default=default, show_default=default is not None, help=meta["help"])
        return click.option(*decls, is_flag=True, default=default, help=meta["help"])
    if meta["parse"] is not None:  # text the parser turns into the value
        text, multiple = meta["cli_default"], meta["repeat"]
        return click.option(
            *decls,
            default=text,
            callback=parsed(meta["parse"], missing=default),
            multiple=multiple,
            metavar=meta["metavar"],
            required=required,
            show_default=meta["show_default"] if text is not None else False,
            help=meta["help"],
        )
    if meta["path"] == "output":
        kind = OutputPath()
    elif meta["path"] == "input":
        kind = click.Path()
    elif meta["choices"] is not None:
        kind = click.Choice(list(meta["choices"]))
    # click (8.2+) takes an explicit default of None as a value: a required option gets none
    given_default = {} if required else {"default": default}
    return click.option(
        *decls,
        type=kind,
        **given_default,
        multiple=multiple,
        metavar=meta["metavar"],
        required=required,
        show_default=meta["show_default"] if default not in (None, ()) else False,
        help=meta["help"],
    )


def setting_options(cls, *, first: type | None = None):
    """A decorator adding an option for every setting of the dataclass ``cls`` to a click command, the fields of
    ``first`` (a class ``cls`` extends) last-declared first: `g3 train` lists training's own settings before the
    runtime's."""
    hints = typing.get_type_hints(cls)  # each field's type in the namespace of the class that declares it
    fields = [f for f in dataclasses.fields(cls) if "setting" in f.metadata]
    if first is not None:
        own = set(first.__annotations__)
        fields = [f for f in fields if f.name in own] + [f for f in fields if f.name not in own]

    def add(command):
        for f in reversed(fields):  # the last option added is shown first
            command = setting_option(f, hints[f.name])(command)
        return command

    return add


def settings_of(cls, given: dict):
    """An instance of the options dataclass ``cls`` from the command's keywords that are its settings (a command
    made from several dataclasses hands each its own)."""
    return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if f.name in given})
