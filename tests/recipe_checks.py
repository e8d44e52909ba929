"""What the recipes of docs/extending.md must leave true, checked per registered name: run as
``python tests/recipe_checks.py ROOT [layout:NAME | dataset:NAME ...]`` with ROOT/src on PYTHONPATH, it prints a JSON
object {name: [problems]} for every table layout, figure kind and dataset of the fedkd at ROOT
(its schema and config/README.md too). The NAMEs are also put in a small configuration and
checked the way the workflow uses them. tests/test_recipes.py runs it on this repository and on
copies of it that follow a recipe with one step left out."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml


def layout_list_of(readme: str) -> set[str]:
    """The layouts config/README.md's `layout` row lists."""
    row = next(line for line in readme.splitlines() if line.startswith("| `layout` |"))
    return set(re.findall(r"`([a-z_0-9]+)`", row.split("|")[2]))


def layout_rows_of(readme: str) -> set[str]:
    """The layouts config/README.md's table of layouts has a row for."""
    return set(re.findall(r"^\| `([a-z_0-9]+)` \| ", readme, re.M))


def out_of_order(enum: list[str], registry: list[str]) -> set[str]:
    """The names of ``enum`` outside its longest run in the registry's order: one name put in
    the wrong place is that name alone."""
    known = [n for n in enum if n in registry]
    rank = [registry.index(n) for n in known]
    best: list[list[str]] = []
    for i, r in enumerate(rank):
        before = [best[j] for j in range(i) if rank[j] < r]
        best.append(max(before, key=len, default=[]) + [known[i]])
    return set(known) - set(max(best, key=len, default=[]))


def layout_problems(root: Path, schema: dict, readme: str) -> dict[str, list[str]]:
    from fedkd.report.render import RENDER_OPTION_HELP, RENDER_SHARED
    from fedkd.report.sections import figure_how
    from fedkd.report.targets import LAYOUTS

    enum = schema["$defs"]["target"]["properties"]["layout"]["enum"]
    listed, rows = layout_list_of(readme), layout_rows_of(readme)
    misplaced = out_of_order(enum, list(LAYOUTS))
    problems: dict[str, list[str]] = {}
    for name, layout in LAYOUTS.items():
        found = problems.setdefault(name, [])
        try:
            if not callable(layout.build()):
                found.append("builder: not a function")
        except (ImportError, AttributeError) as exc:
            found.append(f"builder: {exc}")
        if layout.label_order and "columns" not in layout.options:
            found.append("options: no 'columns'")
        for option in (*layout.options, *layout.run_options):
            if option not in RENDER_SHARED and option not in RENDER_OPTION_HELP:
                found.append(f"render help: no RENDER_OPTION_HELP[{option!r}]")
        if layout.output == "figure" and not figure_how(name):
            found.append("report text: no figure_how entry")
        if name not in enum:
            found.append("schema: not in the layout enum")
        elif name in misplaced:
            found.append("schema: the layout enum is not in the registry's order")
        if name not in listed:
            found.append("config/README.md: not in the layout list")
        if name not in rows:
            found.append("config/README.md: no row in the table of layouts")
    return problems


def dataset_problems(schema: dict) -> dict[str, list[str]]:
    from fedkd.data import DATASETS

    enum = schema["$defs"]["dataset"]["enum"]
    misplaced = out_of_order(enum, list(DATASETS))
    problems: dict[str, list[str]] = {}
    for name in DATASETS:
        found = problems.setdefault(name, [])
        if name not in enum:
            found.append("schema: not in the dataset enum")
        elif name in misplaced:
            found.append("schema: the dataset enum is not in the registry's order")
    return problems


def used_problems(root: Path, schema_path: Path, names: list[str], tmp: Path) -> dict:
    """Each of ``names`` ("layout:NAME" or "dataset:NAME") in a configuration, as the workflow
    uses it."""
    from fedkd.config import RunSpec, SpecError
    from fedkd.data import load_dataset
    from fedkd.pipeline import ConfigError, Plan, validate_config
    from fedkd.report.aggregate import ReportError
    from fedkd.report.options import Options
    from fedkd.report.targets import LAYOUTS

    problems: dict[str, list[str]] = {}
    for kind_name in names:
        kind, name = kind_name.split(":")
        found = problems.setdefault(name, [])
        config = yaml.safe_load((root / "config" / "tiny.yaml").read_text())
        config.pop("figures", None)
        if kind == "dataset":
            try:
                data = load_dataset(name, root=tmp, seed=0)
                if data.name != name or not len(data.train):
                    found.append(f"loader: returned {data.name!r} with {len(data.train)} samples")
                RunSpec(strategy="fedavg", dataset=name)
            except (SpecError, ValueError, OSError, ImportError, AttributeError) as exc:
                found.append(f"use: {exc}")
            continue
        layout = LAYOUTS.get(name)
        if layout is None:
            found.append("use: not a registered layout")
            continue
        config["tables" if layout.output == "table" else "figures"] = {
            "made": {
                "layout": name,
                "caption": "A throwaway.",
                "grid": {"dataset": ["mnist5k"]},
                "columns": {"fedavg": "fedavg"},
            }
        }
        if layout.output == "figure":
            config["tables"] = {}
        try:
            validate_config(config, schema_path, check_specs=False)
            plan = Plan(config)
            Options("made", plan.render_options("made"), layout.options + layout.run_options)
        except (ConfigError, ReportError) as exc:
            found.append(f"use: {exc}")
    return problems


def main(argv: list[str]) -> None:
    import tempfile

    root, names = Path(argv[0]), argv[1:]
    schema_path = root / "workflow" / "schemas" / "config.schema.yaml"
    schema = yaml.safe_load(schema_path.read_text())
    readme = (root / "config" / "README.md").read_text()
    problems = {
        **layout_problems(root, schema, readme),
        **dataset_problems(schema),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, found in used_problems(root, schema_path, names, Path(tmp)).items():
            problems.setdefault(name, []).extend(found)
    print(json.dumps(problems))


if __name__ == "__main__":
    main(sys.argv[1:])
