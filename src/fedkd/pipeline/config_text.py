"""The configuration's text refused at planning where a job would fail on it later: a column
label or a data_root a job's argument parser would take for a flag (``-x``), an empty one, one
with a control character (NUL cannot be an argument; a newline splits the runs file), a label
with a bidi override (U+202E would reorder the row of every table it is shown in), one longer
than a file name may be, a label written with spaces around it (matched as written, it would
empty its column), a render job's options too large for one command-line argument or that its
own check refuses on the runs as planned, a stand-in that names no paper dataset, and
dataset_options a dataset's loader does not take."""

from __future__ import annotations

import json
import re

from fedkd.echo import label_character_problem, safe_text, shown

# a column label: shown in tables and figures, never a file name; room for "FedGKD (M=3, KL)"
MAX_LABEL_CHARS = 100
# a file name's limit on Linux and macOS (NAME_MAX): each folder of a path, in UTF-8 bytes
MAX_NAME_BYTES = 255
# a whole path (PATH_MAX)
MAX_PATH_BYTES = 4096
# a render job's options reach it as one argument of its shell command (`--options JSON`), and
# Linux limits one argument to 128 KiB (MAX_ARG_STRLEN); a caption is at most MAX_CAPTION_CHARS
# (workflow/schemas/config.schema.yaml), so only row names or titles by the thousand reach this
MAX_RENDER_OPTIONS_BYTES = 64 * 1024
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def label_problem(label: str) -> str | None:
    """Why ``label`` cannot be a column label, or None."""
    if not label:
        return "is empty; give the column a name"
    if label != label.strip():
        return (
            "has spaces around it; labels are matched as written, so write it without them "
            f"({label.strip()!r})"
        )
    if CONTROL.search(label):
        return "holds a control character (a newline, a tab, NUL); write it on one line"
    problem = label_character_problem(label)
    if problem:  # a bidi override would reorder the table row it is shown in
        return problem
    if label[0] in "-#":
        return (
            f"starts with {label[0]!r}, which a job reads as a flag or a comment; "
            "start it with a letter or digit"
        )
    if len(label) > MAX_LABEL_CHARS:
        return f"is {len(label):,} characters long; keep a label to {MAX_LABEL_CHARS}"
    return None


def path_problem(path: str) -> str | None:
    """Why ``path`` (a data_root) cannot be given to a job, or None."""
    if not path:
        return "is empty; give a folder, or null for $FEDKD_DATA or ./data"
    if CONTROL.search(path):
        return "holds a control character (a newline, a tab, NUL); no folder is named so"
    if path.startswith("-"):
        return f"starts with '-', which a job reads as a flag; write it as ./{path}"
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        return f"is {size:,} bytes long, more than the {MAX_PATH_BYTES:,} a path may be"
    long = [p for p in path.split("/") if len(p.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES]
    if long:
        return f"has a folder name over {MAX_NAME_BYTES} bytes ({long[0][:40]!r}...)"
    return None


def label_errors(cfg: dict) -> list[str]:
    """Every column label of every table and figure, as written."""
    errors = []
    for group in ("tables", "figures"):
        for name, entry in (cfg.get(group) or {}).items():
            if not isinstance(entry, dict) or not isinstance(entry.get("columns"), dict):
                continue
            for label in entry["columns"]:
                problem = label_problem(label) if isinstance(label, str) else "is not text"
                if problem:
                    errors.append(
                        f"{group}.{safe_text(name)}.columns: the label {shown(label)} {problem}"
                    )
    return errors


def data_root_errors(cfg: dict) -> list[str]:
    """The data_root of ``defaults`` and of each ``datasets`` entry."""
    places = [("defaults", cfg.get("defaults"))]
    places += [(f"datasets.{d}", keys) for d, keys in (cfg.get("datasets") or {}).items()]
    errors = []
    for where, keys in places:
        if isinstance(keys, dict) and isinstance(keys.get("data_root"), str):
            problem = path_problem(keys["data_root"])
            if problem:
                errors.append(f"{where}.data_root: {keys['data_root'][:80]!r} {problem}")
    return errors


# options the workflow fills from a table's columns, refused under options: written there, no
# run would be planned for a sweep's variants, and a column's cells would be called absent where
# runs exist
FILLED_FROM_COLUMNS = ("best_of", "absent")


def render_option_errors(plan) -> list[str]:
    """Each render job's options: names its layout takes (the job would refuse any other after
    the runs trained), within what one command-line argument may hold."""
    from fedkd.report.options import options_taken

    errors = []
    for name in plan.outputs:
        options = plan.render_options(name)
        layout = plan.layout(name)
        group = f"{layout.output}s"
        filled = sorted(set(FILLED_FROM_COLUMNS) & set(plan.outputs[name].get("options") or {}))
        if filled:
            errors.append(
                f"{group}.{name}.options: {', '.join(filled)} come(s) from the columns; write "
                f"it under columns.<label> (config/README.md, columns), not under options"
            )
        takes = options_taken(layout.options)
        unknown = sorted(set(map(str, options)) - takes)
        if unknown:
            errors.append(
                f"{group}.{name}.options: layout {layout.name} has no option(s) "
                f"{', '.join(map(safe_text, unknown))}; its options are: "
                f"{', '.join(sorted(takes - set(FILLED_FROM_COLUMNS)))}"
            )
        if filled or unknown:  # the checks below read the options as the job would take them
            continue
        problem = _source_problem(plan, name, options)
        if problem:
            errors.append(f"{group}.{name}.options: {problem}")
        size = len(json.dumps(options, sort_keys=True).encode())
        if size > MAX_RENDER_OPTIONS_BYTES:
            errors.append(
                f"{group}.{name}: its render options (caption, names, titles) come to "
                f"{size:,} bytes, more than the {MAX_RENDER_OPTIONS_BYTES:,} a job's command "
                "line takes; shorten them"
            )
    return errors


def _source_problem(plan, name: str, options: dict) -> str | None:
    """The render job's own check of its options against its source (a row key the aggregate
    does not have, a title per partition file), made on the source as planned: the columns
    every aggregate has, the partition files the plan names."""
    from fedkd.report.aggregate import AGGREGATE_COLUMNS, ReportError
    from fedkd.report.keys import check_naming_options
    from fedkd.report.options import Options

    layout = plan.layout(name)
    check = layout.checked_options()
    if check is None:
        return None
    if layout.input == "aggregate":
        import pandas as pd

        source = pd.DataFrame(columns=AGGREGATE_COLUMNS)
    else:
        source = plan.render_inputs(name)
    try:
        opts = Options(name, options, layout.options)
        if "column_names" in layout.options:
            check_naming_options(source, opts)
        check(source, opts)
    except ReportError as exc:
        return safe_text(exc, None)
    return None


def stand_in_errors(stand_ins: dict) -> list[str]:
    """Each stand-in names datasets of the papers as the papers spell them (any case), the one
    spelling that both the tables beside the paper (``stand_in_map``) and the claims
    (``stands_for``) match; any other matches no paper cell, and its comparisons would be left
    out unsaid."""
    from fedkd.report.names import PAPER_DATASETS
    from fedkd.report.tables.vs_paper import stand_in_map

    spelt = {name.lower() for name in PAPER_DATASETS.values()}
    errors = []
    for dataset, text in stand_ins.items():
        names = [name for _, name in stand_in_map({dataset: text}).values()]
        unknown = [name for name in names if name.lower() not in spelt] or ([] if names else [text])
        if unknown:
            what = "is not a dataset" if len(unknown) == 1 else "are not datasets"
            errors.append(
                f"stand_ins.{safe_text(dataset)}: {', '.join(map(shown, unknown))} {what} of the "
                "papers; name the one it stands in for as the papers spell it "
                f"({', '.join(PAPER_DATASETS.values())}), several joined by ', ' or ' and '"
            )
    return errors


def dataset_option_errors(cfg: dict, datasets) -> list[str]:
    """The dataset_options each dataset in use takes (``datasets.D`` over ``defaults``) against
    its loader's keywords and their types: `fedkd train` refuses any other, after its job
    started."""
    from fedkd.data import loader_options
    from fedkd.pipeline.data_check import option_value_errors

    errors = []
    for dataset in sorted(datasets):
        own = (cfg.get("datasets") or {}).get(dataset) or {}
        where = f"datasets.{dataset}" if "dataset_options" in own else "defaults"
        options = {**(cfg.get("defaults") or {}), **own}.get("dataset_options")
        if not isinstance(options, dict):
            continue
        accepted = loader_options(dataset)
        unknown = sorted(set(map(str, options)) - set(accepted))
        if unknown:
            errors.append(
                f"{where}.dataset_options: dataset {shown(dataset)} has no option(s) "
                f"{', '.join(map(safe_text, unknown))}; its options are: "
                f"{', '.join(accepted) or 'none'}"
            )
        errors += [f"{where}.{e}" for e in option_value_errors(dataset, options)]
    return errors
