"""User text echoed in a message, safe for a terminal and a log: every character that is not
printable (a control character such as ESC, which starts a terminal's escape sequences; a bidi
override such as U+202E, which reorders what follows it; a line separator) is written as its
escape (``\\x1b``, ``\\u202e``), as Python's repr writes it, and text longer than a limit is cut,
its length said. ``shown`` is the quoted form a message gives a value (``{value!r}`` made safe
and short); ``safe_text`` the unquoted one (a path, a key); ``safe_message`` guards a whole
message, line by line, where it is printed."""

from __future__ import annotations

import unicodedata

# a value quoted in a message: room for a path or a long label, not for a file's worth of text
SHOWN_CHARS = 80
# a path in a message: whole as far as this, so that its file name, at its end, is not cut off
PATH_CHARS = 1000
# one line of a message: every listing fedkd writes (the valid keys, the valid targets) fits
MESSAGE_LINE_CHARS = 2000

# the characters that reorder text around them (Unicode's bidirectional formatting characters)
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _cut_note(text: str, limit: int | None) -> tuple[str, str]:
    if limit is None or len(text) <= limit:
        return text, ""
    return text[:limit], f"... ({len(text):,} characters)"


def safe_text(text: object, limit: int | None = SHOWN_CHARS) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\u202e``), cut to
    ``limit`` characters (None: whole) with its length said."""
    head, note = _cut_note(str(text), limit)
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in head) + note


def shown(value: object, limit: int | None = SHOWN_CHARS) -> str:
    """A value as a message quotes it: ``repr`` (text in quotes, its non-printable characters
    escaped), a long one cut to ``limit`` characters with its length said."""
    if isinstance(value, str):
        head, note = _cut_note(value, limit)
        return safe_text(repr(head), None) + note
    return safe_text(repr(value), limit)


def safe_message(message: object, line_limit: int = MESSAGE_LINE_CHARS) -> str:
    """A whole message as it may be printed: its lines kept, each made safe by ``safe_text``
    and cut to ``line_limit`` characters."""
    return "\n".join(safe_text(line, line_limit) for line in str(message).split("\n"))


def unsafe_character(text: str) -> str | None:
    """The first character of ``text`` that a label or name shown in a table must not hold,
    described (``"U+202E (RIGHT-TO-LEFT OVERRIDE)"``), or None: a control character, a bidi
    formatting character, a line or paragraph separator, a lone surrogate."""
    for ch in text:
        category = unicodedata.category(ch)
        if ch in BIDI_CONTROLS or category in ("Cc", "Zl", "Zp", "Cs"):
            name = unicodedata.name(ch, "a control character")
            return f"U+{ord(ch):04X} ({name})"
    return None


def label_character_problem(label: str) -> str | None:
    """Why ``label`` (a table's row or column name) cannot be used for a character it holds
    (``unsafe_character``), as the end of a sentence about it; None if it holds none. One rule
    for every place a label enters: a configuration, ``fedkd train --label``, ``fedkd
    aggregate``'s runs."""
    unsafe = unsafe_character(label)
    if unsafe is None:
        return None
    return (
        f"holds the invisible character {unsafe}, which would change how the tables around it "
        "read; remove it"
    )
