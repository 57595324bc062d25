"""User text in messages: every error hqflow raises is one line, safe to print on a terminal; and the one
check that a name is Unicode text at all (``lone_surrogate``)."""
from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` safe to print on one terminal line: control and formatting characters (newlines, escape
    sequences, right-to-left overrides, lone surrogates) written as escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for ch in text)


def lone_surrogate(text: object) -> str | None:
    """The first lone surrogate in ``text`` (``'\\ud800'``: JSON's ``\\ud800`` escapes and file names that are
    not UTF-8 make them), which no UTF-8 output can write; None when it has none or is not a string."""
    if not isinstance(text, str):
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


def number(value: object) -> str:
    """A user's number for a message: an integer of more than 20 digits by its length (Python cannot print
    one of more than 4,300), anything else as ``shown``."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"({'a negative' if value < 0 else 'an'} integer of {_digits(abs(value))} digits)"
    return shown(value)


def shown(value: object, limit: int | None = 60) -> str:
    """``repr`` of a user's value for a message: at most ``limit`` characters (None: all), control characters
    escaped (by ``repr``, or by the error's ``one_line``), and never an error itself (an integer Python will
    not print, an object whose ``repr`` fails)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a message must not fail on what it describes
        text = number(value) if isinstance(value, int) else f"<{type(value).__name__} object>"
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def _digits(n: int) -> int:
    """Decimal digits of the positive integer ``n``, without printing it."""
    d = max(1, int(n.bit_length() * 0.30102999566398120))  # log10(2): exact or one short
    while 10**d <= n:
        d += 1
    return d
