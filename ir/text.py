"""User text in messages: every error hqflow raises is one line, safe to print on a terminal."""
from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` safe to print on one terminal line: control and formatting characters (newlines, escape
    sequences, right-to-left overrides, lone surrogates) written as escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for ch in text)
