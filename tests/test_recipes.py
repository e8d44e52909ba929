"""The recipes of docs/extending.md, followed to the end. A strategy is added from outside
src/ (tests/test_toy_strategy.py, tests/test_example_feddyn.py) and so is a claim
(tests/test_claims.py::test_a_claim_module_is_found_without_being_listed). A table layout, a
figure kind and a dataset live in registries inside the package, so they are added to a copy of
it, outside src/, one recipe step at a time: each throwaway that follows every step passes the
checks (tests/recipe_checks.py), and each one that leaves a step out fails with that step."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKS = Path(__file__).with_name("recipe_checks.py")


def check(root: Path, *names: str) -> dict[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    proc = subprocess.run([sys.executable, str(CHECKS), str(root), *names], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def copy_of_the_repository(dest: Path) -> Path:
    """What a recipe edits: the package, the schema and the configuration docs."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "src" / "fedkd", dest / "src" / "fedkd", ignore=ignore)
    shutil.copytree(REPO / "workflow" / "schemas", dest / "workflow" / "schemas")
    (dest / "config").mkdir()
    for name in ("README.md", "tiny.yaml"):
        shutil.copy(REPO / "config" / name, dest / "config" / name)
    return dest


def edit(path: Path, after: str, text: str, count: int = 1) -> None:
    """Insert ``text`` after the first occurrence of ``after`` (which must be there)."""
    source = path.read_text()
    assert source.count(after) >= count, (path, after)
    at = source.index(after) + len(after)
    path.write_text(source[:at] + text + source[at:])


# ----------------------------------------------------------------------------- layouts and figures
LAYOUT_MODULE = '''"""A throwaway {output}: {what}."""

from fedkd.report.{folder}.{like} import build as {like}_build


def build(source, options):
    return {like}_build(source, options)
'''

# name → (output, options, steps left out); every throwaway takes options the grid or the curves
# take, "made_nohelp" one of its own. "own_table" and "own_figure" come first, as a layout and a
# figure kind added to this repository earlier would: the recipe is followed after them.
LAYOUTS = {
    "own_table": ("table", ("rows", "columns"), ()),
    "own_figure": ("figure", ("panels", "columns"), ()),
    "made_table": ("table", ("rows", "columns", "stat"), ()),
    "made_figure": ("figure", ("panels", "columns"), ()),
    "made_nomodule": ("table", ("rows", "columns"), ("module",)),
    "made_nocolumns": ("table", ("rows",), ()),
    "made_nohelp": ("table", ("rows", "columns", "flavour"), ("help",)),
    "made_noschema": ("table", ("rows", "columns"), ("schema",)),
    "made_misplaced": ("table", ("rows", "columns"), ("schema order",)),
    "made_nolist": ("table", ("rows", "columns"), ("list",)),
    "made_norow": ("table", ("rows", "columns"), ("row",)),
    "made_figure_nohow": ("figure", ("panels", "columns"), ("how",)),
}


def add_layout(root: Path, name: str, output: str, options: tuple, left_out: tuple) -> None:
    """The recipe (docs/extending.md) for a table layout or figure kind, without the steps ``left_out``."""
    src = root / "src" / "fedkd"
    folder, like = ("tables", "grid") if output == "table" else ("figures", "curves")
    if "module" not in left_out:
        (src / "report" / folder / f"{name}.py").write_text(
            LAYOUT_MODULE.format(output=output, what=name, folder=folder, like=like)
        )
    # the registry: a table's entry among the tables, a figure's at the end
    entry = (
        f"        Layout({name!r}, {output!r}, 'aggregate', '{folder}.{name}:build', "
        f"{options!r}, 'A throwaway.'),\n"
    )
    anchor = (
        "    )\n}  # fmt: skip"
        if output == "figure"
        else '        Layout(\n            "partition"'
    )
    registry = src / "report" / "targets.py"
    text = registry.read_text()
    at = text.index(anchor)
    registry.write_text(text[:at] + entry + text[at:])
    if "help" not in left_out:
        for option in options:
            if option not in ("rows", "columns", "stat", "panels"):
                edit(src / "report" / "render.py", "RENDER_OPTION_HELP = {\n",
                     f"    {option!r}: 'a throwaway option',\n")  # fmt: skip
    if output == "figure" and "how" not in left_out:
        edit(src / "report" / "sections.py", "    return {\n",
             f"        {name!r}: 'Lines are the mean over the seeds.',\n")  # fmt: skip
    schema = root / "workflow" / "schemas" / "config.schema.yaml"
    if "schema order" in left_out:
        edit(schema, "        enum:\n", f"          - {name}\n")  # first, before traits
    elif "schema" not in left_out:
        # where the registry has it, whatever was added before: a table's before partition, the
        # first figure kind; a figure kind's at the end of the layout enum
        text = schema.read_text()
        if output == "table":
            at = text.index("          - partition\n")
        else:
            at = text.index("        enum:\n") + len("        enum:\n")
            while text[at:].startswith("          - "):
                at = text.index("\n", at) + 1
        schema.write_text(text[:at] + f"          - {name}\n" + text[at:])
    readme = root / "config" / "README.md"
    if "list" not in left_out:
        # the `layout` row's list of tables ends at `claims`, of figures at `fedcad`
        edit(readme, "`vs_paper`, `claims`" if output == "table" else "`forgetting`, `fedcad`",
             f", `{name}`")  # fmt: skip
    if "row" not in left_out:
        edit(readme, "| `fedcad` | the aggregate (runs with `eval_local: true`) | `panels` ‡ |\n",
             f"| `{name}` | the aggregate | {', '.join(options)} |\n")  # fmt: skip


# ----------------------------------------------------------------------------- datasets
LOADER = '''

def load_{name}(root, seed, download=False):
    """A throwaway dataset: 40 random 8x8 images of 2 classes per split."""
    import torch

    from fedkd.data.base import ArraySplit, FedDataset

    g = torch.Generator().manual_seed(seed)

    def split():
        return ArraySplit(torch.rand(40, 1, 8, 8, generator=g), torch.arange(40) % 2)

    return FedDataset({name!r}, "image", 2, split(), split(), split(), mean=(0.5,), std=(0.25,))
'''

# name → steps left out
DATASETS = {
    "made_data": (),
    "made_data_noschema": ("schema",),
    "made_data_ownmodule": ("family module",),  # its loader in a module of its own: as good
    "made_data_noentry": ("entry",),
}


def add_dataset(root: Path, name: str, left_out: tuple) -> None:
    """The recipe (docs/extending.md) for a dataset, without the steps ``left_out``."""
    data = root / "src" / "fedkd" / "data"
    module = "mnist" if "family module" not in left_out else "made_loaders"
    loader = LOADER.format(name=name)
    if module == "mnist":
        with (data / "mnist.py").open("a") as file:
            file.write(loader)
    else:
        (data / f"{module}.py").write_text(loader)
    if "entry" not in left_out:
        edit(data / "__init__.py", '    "synthtext": DatasetEntry("text:load_synthtext", "distilbert", "text"),\n',
             f'    {name!r}: DatasetEntry("{module}:load_{name}", "cnn", "image"),\n')  # fmt: skip
    if "schema" not in left_out:
        schema = root / "workflow" / "schemas" / "config.schema.yaml"
        text = schema.read_text()
        text, n = re.subn(r"(enum: \[cifar10, [^\]]*synthtext)", rf"\1, {name}", text)
        assert n == 1
        schema.write_text(text)


@pytest.fixture(scope="module")
def problems(tmp_path_factory) -> dict[str, list[str]]:
    root = copy_of_the_repository(tmp_path_factory.mktemp("recipes"))
    for name, (output, options, left_out) in LAYOUTS.items():
        add_layout(root, name, output, options, left_out)
    for name, left_out in DATASETS.items():
        add_dataset(root, name, left_out)
    names = [f"layout:{n}" for n in LAYOUTS] + [f"dataset:{n}" for n in DATASETS]
    return check(root, *names)


def test_this_repository_follows_its_recipes():
    found = check(REPO, "layout:grid", "layout:curves", "dataset:mnist5k")
    assert not {name: p for name, p in found.items() if p}


def test_a_layout_and_a_figure_kind_that_follow_every_step_pass(problems):
    assert problems["made_table"] == [] and problems["made_figure"] == []
    assert problems["own_table"] == [] and problems["own_figure"] == []
    # and nothing else is disturbed by the additions
    assert not {n: p for n, p in problems.items() if p and not n.startswith("made_")}


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("made_nomodule", "builder: No module named 'fedkd.report.tables.made_nomodule'"),
        ("made_nocolumns", "options: no 'columns'"),
        ("made_nohelp", "render help: no RENDER_OPTION_HELP['flavour']"),
        ("made_noschema", "schema: not in the layout enum"),
        ("made_misplaced", "schema: the layout enum is not in the registry's order"),
        ("made_nolist", "config/README.md: not in the layout list"),
        ("made_norow", "config/README.md: no row in the table of layouts"),
        ("made_figure_nohow", "report text: no figure_how entry"),
    ],
)
def test_a_layout_missing_a_step_fails_naming_it(problems, name, problem):
    assert problem in problems[name], problems[name]
    if name == "made_nocolumns":
        # the workflow passes the column labels: planning refuses them, before any job
        assert any(
            "tables.made.options: layout made_nocolumns has no option(s) columns" in p
            for p in problems[name]
        ), problems[name]


def test_a_dataset_that_follows_every_step_passes(problems):
    assert problems["made_data"] == []
    assert problems["made_data_ownmodule"] == []


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("made_data_noschema", "schema: not in the dataset enum"),
        ("made_data_noentry", "use: unknown dataset 'made_data_noentry'"),
    ],
)
def test_a_dataset_missing_a_step_fails_naming_it(problems, name, problem):
    assert any(p.startswith(problem) for p in problems[name]), problems[name]


def test_the_recipes_name_every_step_the_checks_hold_them_to():
    """Each recipe of docs/extending.md names the files and rules that the steps above edit."""
    recipes = (REPO / "docs" / "extending.md").read_text()
    for needed in (
        "FEDKD_STRATEGY_MODULES", "adding-a-strategy.md",
        "src/fedkd/report/targets.py", "`columns`", "RENDER_OPTION_HELP",
        "`layout` enum", "registry's order", "config/README.md", "`figure_how`",
        "src/fedkd/report/claims/papers/", "tests/test_claims.py",
        "`DATASETS`", "its own or its family's", "`dataset` enum",
        # tests/test_data_check.py holds every dataset to one or the other
        "`LOOKED_FOR`", "tests/test_data_check.py",
        "tests/test_recipes.py",
    ):  # fmt: skip
        assert needed in recipes, needed
