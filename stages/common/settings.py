"""Settings declared once: a field of a stage's options dataclass carries its command-line help, and the CLI makes
its option from the field (g3cli/settings.py), as torchtitan's config manager builds its CLI from dataclasses.

``epochs: int = setting(10, "Epochs.")`` is a dataclass field with default 10 whose `--epochs` option says
"Epochs."; the field's type gives the option's (``int | None`` an int that may be left out, ``bool`` a flag,
``tuple[str, ...]`` a repeatable option), ``choices`` a fixed set of values. The Python API takes the same names
as keywords (g3/api.py checks them against the same types), so an option is one line in one place.
"""

from __future__ import annotations

from dataclasses import field

REQUIRED = object()  # a setting without a default: the command's option must be given


def setting(
    default,
    help: str,
    *,
    flag: str | None = None,
    choices=None,
    metavar: str | None = None,
    show_default: bool | str = True,
    path: str | None = None,
    short: str | None = None,
    parse=None,
    cli_default: str | None = None,
    repeat: bool = False,
):
    """A dataclass field that is also a command-line option (see the module's docstring). ``default``
    :data:`REQUIRED`: the option must be given. ``flag``: the option's name when it is not ``--`` + the field's
    with dashes; ``short``: a one-letter alias; ``path``: ``"output"`` for a path the command writes (refused
    where it would replace an input, g3cli.paths.OutputPath), ``"input"`` for one it reads; ``parse``: the option's text to the field's value
    (e.g. a size, ``8GiB``), a ValueError's message being the one-line error; ``cli_default``: the text the
    option shows and parses when not given (``"10Gbit"`` for a default of 1.25e9 bytes/s); ``show_default``: a
    text shown instead of the default; ``repeat``: a parsed option that may be given several times (``parse``
    gets them all; a tuple setting without ``parse`` repeats anyway)."""
    meta = {
        "help": help,
        "flag": flag,
        "choices": choices,
        "metavar": metavar,
        "show_default": show_default,
        "path": path,
        "short": short,
        "parse": parse,
        "cli_default": cli_default,
        "repeat": repeat,
    }
    if isinstance(default, (list, dict, set)):
        raise TypeError("a setting's default is immutable: a tuple, not a list")
    if default is REQUIRED:
        return field(metadata={"setting": meta})
    return field(default=default, metadata={"setting": meta})


def check_choices(options) -> None:
    """Each setting of the dataclass instance ``options`` that has choices holds one of them: one line naming the
    option otherwise (a value from the Python API or a hand-made config, which click did not see)."""
    from dataclasses import fields

    from stages.common.errors import G3InputError

    for f in fields(options):
        meta = f.metadata.get("setting")
        if not meta or meta["choices"] is None:
            continue
        value = getattr(options, f.name)
        values = value if isinstance(value, tuple) else (value,)
        wrong = [v for v in values if v is not None and v not in meta["choices"]]  # None: not given
        if wrong:
            flag = meta["flag"] or "--" + f.name.replace("_", "-")
            raise G3InputError(f"{flag} {wrong[0]} is not one of {', '.join(meta['choices'])}")
