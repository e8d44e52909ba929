"""The code of a Python source file: its text less comments, docstrings and blank lines.

The code hashes (``fedkd.provenance``) hash this, so that rewording an explanation re-runs
nothing while every other edit, a string's contents included, does. Every Python from 3.11 on
gives the same text for the same file: strings and comments are found lexically, docstrings by
the syntax tree's positions (the tree itself differs between versions). Standard library only.
"""

from __future__ import annotations

import ast
import bisect
import io
import re
import sys
import tokenize
from collections.abc import Iterator

_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)

# Python 3.11's strings and comments as its tokenizer finds them, scanned from the left: in
# code that parses, a '#' or a quote outside a string starts a comment or a string. Its
# tokenizer is pure Python and 10x slower than this pattern over the same files.
_ESCAPE = r"\\(?:\r\n|.)"
_STRINGS_AND_COMMENTS = re.compile(
    r"(?P<comment>#[^\r\n]*)"
    r"|'''[^'\\]*(?:(?:" + _ESCAPE + r"|'(?!''))[^'\\]*)*'''"
    r'|"""[^"\\]*(?:(?:' + _ESCAPE + r'|"(?!""))[^"\\]*)*"""'
    r"|'[^\n'\\]*(?:" + _ESCAPE + r"[^\n'\\]*)*'"
    r'|"[^\n"\\]*(?:' + _ESCAPE + r'[^\n"\\]*)*"',
    re.DOTALL,
)
# from Python 3.12 an f-string may hold its own quotes, and the tokenizer (in C there) splits it
# into parts, FSTRING_START to FSTRING_END
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)

Position = tuple[int, int]  # (row from 1, column in characters), as tokenize gives them
Span = tuple[Position, Position]


def scan_by_pattern(source: str) -> tuple[list[Span], list[Span]]:
    """The comments and the strings of ``source`` (Python 3.11's grammar), by the pattern; a
    string starts at its quote."""
    starts = [0]  # each row's offset
    for line in io.StringIO(source):
        starts.append(starts[-1] + len(line))

    def position(offset: int) -> Position:
        row = bisect.bisect_right(starts, offset)
        return row, offset - starts[row - 1]

    comments, strings = [], []
    for match in _STRINGS_AND_COMMENTS.finditer(source):
        last_row, last_col = position(match.end() - 1)
        span = (position(match.start()), (last_row, last_col + 1))
        (comments if match.lastgroup == "comment" else strings).append(span)
    return comments, strings


def scan_by_tokens(source: str) -> tuple[list[Span], list[Span]]:
    """The comments and the strings of ``source``, by the tokenizer of this Python; a string
    starts at its prefix."""
    comments, strings, open_fstrings = [], [], []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments.append((token.start, token.end))
        elif token.type == _FSTRING_START:
            open_fstrings.append(token.start)
        elif token.type in (tokenize.STRING, _FSTRING_END):
            start = open_fstrings.pop() if token.type == _FSTRING_END else token.start
            if not open_fstrings:
                strings.append((start, token.end))
    return comments, strings


def code_text(source: str, tree: ast.Module | None = None) -> str:
    """``source`` less its comments, docstrings and blank lines. A string's contents stay
    whole, its blank lines and trailing spaces included. ``tree``: ``source`` parsed already."""
    if tree is None:  # parsing also checks that the source is this Python's, which the scan needs
        tree = ast.parse(source)
    scan = scan_by_pattern if sys.version_info < (3, 12) else scan_by_tokens
    comments, strings = scan(source)
    # lines as the tokenizer and the parser count them (str.splitlines also splits at form feeds)
    lines = io.StringIO(source).readlines()

    def column(row: int, utf8_offset: int) -> int:  # the tree counts bytes, tokenize characters
        return len(lines[row - 1].encode()[:utf8_offset].decode())

    cuts = [(start, end, "comment") for start, end in comments]
    for node in (tree, *statements(tree.body)):
        if isinstance(node, _DOCUMENTED) and ast.get_docstring(node, clean=False) is not None:
            doc = node.body[0]
            start = (doc.lineno, column(doc.lineno, doc.col_offset))
            end = (doc.end_lineno, column(doc.end_lineno, doc.end_col_offset))
            cuts.append((start, end, "docstring"))
    # rows a multi-line string goes on to: their blank lines are data
    in_string = {row for (first, _), (last, _) in strings for row in range(first + 1, last + 1)}
    for (first_row, first_col), (last_row, last_col), what in sorted(cuts, reverse=True):
        before = lines[first_row - 1][:first_col]
        if what == "comment":  # the spaces before a comment go with it (never inside a string)
            before = before.rstrip(" \t")
        lines[first_row - 1] = before + lines[last_row - 1][last_col:]
        for row in range(first_row + 1, last_row + 1):
            lines[row - 1] = ""
    return "".join(line for row, line in enumerate(lines, 1) if row in in_string or line.strip())


def statements(nodes: list) -> Iterator[ast.AST]:
    """Every statement, nested ones included. An import or a docstring's owner is a statement,
    so this finds every one that ``ast.walk`` would, without visiting the expressions (5x fewer
    nodes: every training job hashes its code)."""
    for node in nodes:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from statements(inner)
