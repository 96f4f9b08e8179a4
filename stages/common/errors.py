"""Errors a user can act on.

A stage raises :class:`G3InputError` for bad input (a missing file, a malformed line, an artifact of another
schema). The CLI turns it into one line on stderr and exit code 2, without a traceback unless ``--debug``.
"""

from __future__ import annotations


class G3InputError(Exception):
    """Bad input: the message names the file (and line) and what is wrong."""

    exit_code = 2

    def __init__(self, message: str, path: object | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line


class G3RuntimeError(Exception):
    """A failure while running (a worker died, a peer timed out); exit code 1."""

    exit_code = 1
