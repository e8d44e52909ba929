"""The measured results as Markdown tables: docs/results.md, generated from bench/results.jsonl.

    python bench/results_table.py --out docs/results.md

(without ``--out`` the tables go to standard output). Each line of bench/results.jsonl is one
measurement, a JSON object with

    id          a short name, unique; docs link to a row as results.md#<id>
    topic       the table it goes in (tables in the order their topics first appear)
    date        YYYY-MM-DD, when it was measured (a ``note`` says so where it is only when the
                figure was first written down)
    device      what it ran on ("NVIDIA H200", "2-core AMD EPYC CPU ...")
    commit      the commit measured, or null where the record names none
    command     the exact command, or null where none was recorded
    what        what was measured, in a few words
    figures     name -> number, or [low, high] for a range or an interval; the unit ends the
                name: img_per_s, seconds, ms, us, minutes, hours, gb, percent, points, kernels,
                tests (no unit: a ratio, an accuracy, a count)
    conditions  what the figures depend on (threads, load, sizes, library versions)

and optionally ``outcome`` (a result that is not a number), ``note``, ``source`` (the raw log,
e.g. under docs/gpu-runs/) and ``readme`` (the row's line in the README's results table, which
``--readme`` prints: the newest row of each such line). A new measurement is a new line; the tables are then generated again.
Rows are newest first within a topic, lines of one date in the file's order.

Every text is shown as the characters written: HTML, links and Markdown's other markup in it are
escaped in the tables (a command is shown as code). A text holding a control character (a
terminal's escape sequence) or a bidi override, which no table can show as written, is refused
with the line and key it is on.

``fedkd bench --out DIR`` writes its figures to DIR/bench-results.jsonl; they become lines here
with the commit measured and what the run depended on:

    python bench/results_table.py --import DIR/bench-results.jsonl --commit abc1234 \
        --topic "GPU: table-3 runs" --conditions "fp32, TF32 off; torch 2.11.0+cu130"
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import unicodedata
from pathlib import Path

from fedkd.echo import BIDI_CONTROLS
from fedkd.files import atomic_write

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results.jsonl"
COMMAND = "python bench/results_table.py --out docs/results.md"

REQUIRED = ("id", "topic", "date", "device", "commit", "command", "what", "figures", "conditions")
OPTIONAL = ("outcome", "note", "source", "readme")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
ID = re.compile(r"[a-z0-9][a-z0-9.+-]*")
COMMIT = re.compile(r"[0-9a-f]{7,40}")
# the unit that ends a figure's name, and how it is written after the number
UNITS = {
    "img_per_s": "img/s",
    "seconds": None,  # written as a duration: 4 min 28 s
    "ms": "ms",
    "us": "µs",
    "minutes": "min",
    "hours": "h",
    "gb": "GB",
    "percent": "%",
    "points": "points",
    "kernels": "kernels",
    "tests": "tests",
}


# line breaks that JSON leaves unescaped: written escaped, so that a line stays one line
RAW_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
SHOWN_CHARS = 80  # a value quoted in a message


class ResultsError(ValueError):
    """A line of the results file that the tables cannot be made from."""


def shown(value) -> str:
    """A value as a message quotes it: short text in quotes (escaped, as repr writes it), a long
    one cut with its length said, an object or a list by its kind."""
    if isinstance(value, str):
        cut = f"... ({len(value):,} characters)" if len(value) > SHOWN_CHARS else ""
        return repr(value[:SHOWN_CHARS]) + cut
    if value is None or isinstance(value, bool | int | float):
        text = repr(value)
        return text if len(text) <= SHOWN_CHARS else f"a number of {len(text):,} digits"
    return f"a JSON {'object' if isinstance(value, dict) else 'list'}"


def parse_line(text: str, where: str):
    """One line as JSON; a line that is not (or nests too deep, or holds a number too long to
    read) is refused naming it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultsError(f"{where}: not JSON ({e.msg}); one JSON object a line") from None
    except RecursionError:
        raise ResultsError(f"{where}: nested too deep to be a result; one flat object") from None
    except ValueError as e:  # an integer of more digits than Python reads
        raise ResultsError(f"{where}: not readable JSON ({e})") from None


def to_line(row: dict) -> str:
    """A row as one line of the results file: JSON, its text as written (UTF-8), save for the
    line breaks JSON leaves raw (U+2028, U+2029, NEL), escaped so the line stays one."""
    text = json.dumps(row, ensure_ascii=False)
    for raw, escaped in RAW_LINE_BREAKS.items():
        text = text.replace(raw, escaped)
    return text


def lines_of(text: str):
    """The file's lines, split where JSON lines end (a newline) only."""
    return enumerate(text.split("\n"), start=1)


def load(path: Path = RESULTS) -> list[dict]:
    """Every row of the results file, each checked; errors name the line and the key."""
    rows, seen = [], {}
    for number, text in lines_of(path.read_text(encoding="utf-8")):
        if not text.strip():
            continue
        where = f"{path.name} line {number}"
        row = parse_line(text, where)
        check_row(row, where)
        if row["id"] in seen:
            raise ResultsError(f"{where}: id {row['id']!r} is also line {seen[row['id']]}'s")
        seen[row["id"]] = number
        rows.append(row)
    return rows


def check_row(row, where: str) -> None:
    if not isinstance(row, dict):
        raise ResultsError(f"{where}: a JSON object is needed, got {type(row).__name__}")
    missing = [key for key in REQUIRED if key not in row]
    if missing:
        raise ResultsError(f"{where}: missing {', '.join(missing)} (every line has {REQUIRED})")
    unknown = sorted(set(row) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ResultsError(f"{where}: unknown key(s) {unknown}; known: {REQUIRED + OPTIONAL}")
    for key in ("id", "topic", "date", "device", "what", "conditions"):
        if not isinstance(row[key], str) or not row[key].strip():
            raise ResultsError(f"{where}: {key} must be non-empty text, got {shown(row[key])}")
    if not ID.fullmatch(row["id"]):
        raise ResultsError(
            f"{where}: id {shown(row['id'])}: lower-case letters, digits, . + - only"
        )
    if not DATE.fullmatch(row["date"]):
        raise ResultsError(f"{where}: date {shown(row['date'])} is not YYYY-MM-DD")
    commit = row["commit"]
    if commit is not None and not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
        raise ResultsError(
            f'{where}: commit {shown(commit)} is not a hash written as text ("abc1234"), or null'
        )
    if row["command"] is not None and not (isinstance(row["command"], str) and row["command"]):
        raise ResultsError(f"{where}: command must be text or null, got {shown(row['command'])}")
    for key in OPTIONAL:
        if key in row and not (isinstance(row[key], str) and row[key].strip()):
            raise ResultsError(f"{where}: {key} must be non-empty text, got {shown(row[key])}")
    figures = row["figures"]
    if not isinstance(figures, dict) or not figures:
        raise ResultsError(f"{where}: figures must be a non-empty object of name -> number")
    for name, value in figures.items():
        if not (is_number(value) or is_range(value)):
            raise ResultsError(
                f"{where}: figure {shown(name)} = {shown(value)}: a finite number or [low, high] "
                "is needed"
            )
    texts = [(key, row[key]) for key in row if isinstance(row[key], str)]
    for key, text in texts + [("figures", name) for name in figures]:
        problem = unshowable(text)
        if problem:
            raise ResultsError(
                f"{where}: {key} holds {problem}, which a table cannot show as written; remove it"
            )


def unshowable(text: str) -> str | None:
    """The first character of ``text`` no table can show as written, described, or None: a
    control character other than white space (ESC starts a terminal's escape sequences), a bidi
    formatting character (U+202E reorders what follows), a lone surrogate (not UTF-8)."""
    for ch in text:
        category = unicodedata.category(ch)
        if ch in BIDI_CONTROLS or category == "Cs" or (category == "Cc" and not ch.isspace()):
            return f"U+{ord(ch):04X} ({unicodedata.name(ch, 'a control character')})"
    return None


def is_number(value) -> bool:
    """A finite number (JSON's Infinity and NaN, which Python reads, are no measurement)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_range(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(map(is_number, value))


def split_unit(name: str) -> tuple[str, str | None]:
    """(label, unit key) of a figure's name: ``local_img_per_s`` -> (``local``, ``img_per_s``)."""
    for unit in UNITS:
        if name == unit:
            return "", unit
        if name.endswith("_" + unit):
            return name[: -len(unit) - 1], unit
    return name, None


def number(value) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1e6:  # 6 significant digits would write it as 1.23457e+06
        return f"{value:,.0f}"
    return f"{value:,.6g}"


def duration(seconds) -> str:
    if seconds < 60:
        return f"{number(seconds)} s"
    # rounded before minutes are split off, so that 119.999 s is 2 min 00 s, not 1 min 60 s
    minutes, rest = divmod(round(seconds, 2), 60)
    rest = round(rest, 2)  # divmod's float residue: 1633.58 leaves 13.579999...
    return f"{number(int(minutes))} min {number(rest) if rest % 1 else f'{int(rest):02d}'} s"


def figure(name: str, value) -> str:
    label, unit = split_unit(name)
    if unit == "seconds":
        text = " – ".join(map(duration, value)) if is_range(value) else duration(value)
    else:
        if is_range(value):
            low, high = map(number, value)
            # ci95 (ci90, ...) names a confidence interval; any other pair is a range
            interval = any(re.fullmatch(r"ci\d+", word) for word in label.split("_"))
            text = f"[{low}, {high}]" if interval else f"{low}–{high}"
        else:
            text = number(value)
        if unit is not None:
            text += UNITS[unit] if unit == "percent" else f" {UNITS[unit]}"
    label = label.replace("_", " ")
    return f"{label} {text}" if label else text


# what a character of plain text is written as in a table cell: backslashes and pipes escaped
# (a pipe would end the cell), brackets escaped (no link: [x](javascript:...)), HTML's "<", ">"
# and "&" as entities (Markdown passes raw HTML and entities through)
CELL_ESCAPES = {
    "\\": "\\\\",
    "|": "\\|",
    "[": "\\[",
    "]": "\\]",
    "<": "&lt;",
    ">": "&gt;",
    "&": "&amp;",
}


def cell(text: str) -> str:
    """Plain text as one table cell: line breaks folded, markup escaped (CELL_ESCAPES)."""
    return "".join(CELL_ESCAPES.get(ch, ch) for ch in " ".join(text.split()))


def code(text: str) -> str:
    """Text as a code span in a table cell: fenced by more backticks than it holds in a row,
    pipes escaped (a table splits its cells before it reads code)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""
    body = " ".join(text.split()).replace("|", "\\|")
    return f"{fence}{pad}{body}{pad}{fence}"


def anchor(topic: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", topic.lower()).replace(" ", "-")


def render_row(row: dict) -> str:
    figures = "; ".join(figure(name, value) for name, value in row["figures"].items())
    if "outcome" in row:
        figures += f"; {row['outcome']}"
    conditions = row["conditions"]
    if "note" in row:
        conditions += f". Note: {row['note']}"
    if "source" in row:
        conditions += f". Log: {row['source']}"
    cells = [
        f'<a id="{row["id"]}"></a>`{row["id"]}`',
        row["date"],
        cell(row["device"]),
        code(row["commit"]) if row["commit"] else "—",
        cell(row["what"]),
        cell(figures),
        cell(conditions),
        code(row["command"]) if row["command"] else "—",
    ]
    return "| " + " | ".join(cells) + " |"


def render(rows: list[dict]) -> str:
    topics: dict[str, list[dict]] = {}
    for row in rows:
        topics.setdefault(row["topic"], []).append(row)
    lines = [
        "# Measured results",
        "",
        f"Generated from [bench/results.jsonl](../bench/results.jsonl) by `{COMMAND}`: "
        "edit the JSON lines, not this file. What the engine does and why is in "
        "[performance.md](performance.md); the raw logs of the GPU kit's runs are under "
        "[gpu-runs/](gpu-runs/).",
        "",
        "Compare wall times only between rows of the same device: two machines sold as the same "
        '"2 cores" differ twofold (the bare PyTorch loop of [CPU: the engine against a bare '
        "PyTorch loop](#cpu-the-engine-against-a-bare-pytorch-loop) calibrates a machine). "
        "Rows are newest first within a table.",
        "",
    ]
    lines += [f"- [{cell(topic)}](#{anchor(topic)})" for topic in topics]
    for topic, members in topics.items():
        # newest first; a stable sort keeps the file's order within a date
        members = sorted(members, key=lambda r: r["date"], reverse=True)
        lines += [
            "",
            f"## {cell(topic)}",
            "",
            "| row | date | device | commit | what | figures | conditions | command |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [render_row(row) for row in members]
    return "\n".join(lines) + "\n"


README_FIGURES = 2  # figures a README line shows; its row in docs/results.md has them all


def render_readme(rows: list[dict]) -> str:
    """The README's results table: for each ``readme`` line, its newest row's first figures and a
    link to the row (the date and conditions are there)."""
    newest: dict[str, dict] = {}
    for row in rows:
        if "readme" in row and (
            row["readme"] not in newest or row["date"] >= newest[row["readme"]]["date"]
        ):
            newest[row["readme"]] = row
    lines = ["| what | on | measured | row |", "|---|---|---|---|"]
    for label, row in newest.items():
        shown = list(row["figures"].items())[:README_FIGURES]
        figures = "; ".join(figure(name, value) for name, value in shown)
        link = f"[row](docs/results.md#{row['id']})"
        lines.append(f"| {cell(label)} | {cell(row['device'])} | {cell(figures)} | {link} |")
    return "\n".join(lines) + "\n"


def from_bench(line: dict, *, commit: str | None, topic: str, conditions: str) -> dict:
    """A line of ``fedkd bench --out``'s bench-results.jsonl as a row of the results file."""
    details = line.get("details") or {}
    if "local_img_s_each" in details:  # runs packed on one device, timed together
        each = details["local_img_s_each"]
        figures = {
            "together_img_per_s": round(line["img_s"]),
            "each_local_img_per_s": [round(min(each)), round(max(each))],
        }
    elif line["img_s"] is None:  # an accuracy check (--precision-check): each seed's figures
        figures = {
            f"{key.removesuffix('_by_seed')}_seed_{seed}": value
            for key in ("final_acc_by_seed", "best_acc_by_seed")
            for seed, value in (details.get(key) or {}).items()
        }
    else:
        figures = {"img_per_s": round(line["img_s"])}
        if "local_img_s" in details:
            figures["local_img_per_s"] = round(details["local_img_s"])
        if "projected_min_100" in details:
            figures["per_100_rounds_minutes"] = round(details["projected_min_100"], 1)
    name = "-".join(
        str(part) for part in (
            line["device"].split()[-1], details.get("strategy"),
            f"pack{details['k']}" if "k" in details else details.get("engine"), commit,
        ) if part
    )  # fmt: skip
    row = {
        "id": re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-"),
        "topic": topic, "date": line["date"], "device": line["device"], "commit": commit,
        "command": line.get("command"), "what": line["what"], "figures": figures,
        "conditions": conditions,
    }  # fmt: skip
    return row


def import_bench(path: Path, results: Path, **fields) -> list[dict]:
    """Appends the lines of a bench-results.jsonl to the results file (ids made unique)."""
    taken = {row["id"] for row in load(results)} if results.exists() else set()
    rows = []
    for number, text in lines_of(path.read_text(encoding="utf-8")):
        if not text.strip():
            continue
        where = f"{path.name} line {number}"
        line = parse_line(text, where)
        try:
            row = from_bench(line, **fields)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
            problem = f"{type(e).__name__}: {shown(str(e))}"
            raise ResultsError(f"{where}: not a line of fedkd bench --out ({problem})") from None
        base, n = row["id"], 2
        while row["id"] in taken:
            row["id"], n = f"{base}-{n}", n + 1
        taken.add(row["id"])
        check_row(row, where)
        rows.append(row)
    with open(results, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(to_line(row) + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSON lines to read")
    parser.add_argument(
        "--import", dest="bench", type=Path, metavar="BENCH_JSONL",
        help="append the lines fedkd bench --out wrote (then generate the tables again)",
    )  # fmt: skip
    parser.add_argument(
        "--readme", action="store_true", help="print the README's results table instead"
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE",
        help="write the tables to FILE (replaced whole, only once every row is read) instead of "
        "standard output",
    )  # fmt: skip
    parser.add_argument("--commit", help="with --import: the commit measured")
    parser.add_argument("--topic", default="GPU: table-3 runs", help="with --import: the table")
    parser.add_argument("--conditions", help="with --import: what the figures depend on")
    args = parser.parse_args(argv)
    try:
        if args.bench is not None:
            if not args.conditions:
                raise ResultsError("--import needs --conditions: what the figures depend on")
            for flag, text in (("--conditions", args.conditions), ("--topic", args.topic)):
                if unshowable(text):
                    raise ResultsError(
                        f"{flag} holds {unshowable(text)}, which a table cannot show as written; "
                        "remove it"
                    )
            rows = import_bench(
                args.bench, args.results,
                commit=args.commit, topic=args.topic, conditions=args.conditions,
            )  # fmt: skip
            print(f"added {len(rows)} row(s) to {args.results}; now: {COMMAND}")
            return 0
        rows = load(args.results)
    except (OSError, ValueError) as e:
        print(f"results_table: {e}", file=sys.stderr)
        return 1
    text = render_readme(rows) if args.readme else render(rows)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    # written only now, and atomically: a refused row or a failed write leaves the tables as
    # they were (a shell redirection would have emptied the file first)
    try:
        atomic_write(args.out, lambda file: file.write(text.encode("utf-8")))
    except (OSError, ValueError) as e:  # ValueError: a link at the file (SymlinkError)
        print(f"results_table: {args.out}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
