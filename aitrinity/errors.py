"""One exception hierarchy for every user-facing failure.

A user mistake is a :class:`TrinityError` whose ``str()`` is a single line that
names the field, the value and what was expected. The CLI prints that line and
exits with status 2; it never shows a traceback for these.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TrinityError(Exception):
    """Base class of every error aitrinity raises on purpose."""


class UnitError(TrinityError, ValueError):
    """A quantity string could not be parsed, or has the wrong dimension."""


class SpecError(TrinityError, ValueError):
    """An input (scenario, catalog file, override) is invalid.

    ``field`` is a dotted path such as ``plan.tp``; ``value`` the offending value;
    ``source`` the file it came from, when there is one.
    """

    def __init__(self, field: str, value: object, expected: str, source: str = "", missing: bool = False) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        self.source = source
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        where = "".join(f"{p}: " for p in (source, field) if p)
        what = "required but missing" if missing else f"got {shown}, expected {expected}"
        super().__init__(f"{where}{what}")

    @classmethod
    def at(cls, where: object, problem: str) -> SpecError:
        """A problem stated whole: ``where: problem`` (an unreadable file, an unparsable override)."""
        shown = str(where) if len(str(where)) <= 200 else str(where)[:197] + "..."
        err = cls("", where, problem, source=shown)
        err.args = (f"{shown}: {problem}",)
        return err


class UnknownNameError(TrinityError, LookupError):
    """A catalog name does not exist; the message lists the closest names."""

    def __init__(self, kind: str, name: str, known: Iterable[str], field: str = "") -> None:
        self.kind = kind
        self.name = name
        self.known = sorted(set(known))
        self.field = field
        close = difflib.get_close_matches(name.lower(), self.known, n=3, cutoff=0.5)
        self.suggestions = close
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(self.known[:12])}"
        where = f"{field}: " if field else ""
        shown = repr(name) if len(name) <= 80 else repr(name[:77] + "...")
        super().__init__(f"{where}unknown {kind} {shown}{hint}")

    def at(self, field: str) -> UnknownNameError:
        """The same error, naming the input field it came from."""
        return UnknownNameError(self.kind, self.name, self.known, field)


class InfeasibleError(TrinityError):
    """A requested computation has no answer for this input (e.g. nothing fits)."""
