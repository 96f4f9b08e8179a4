"""g3's version, in one place: the package's metadata (pyproject.toml) and every artifact that records it read it
here."""

VERSION = "0.1.0"
