"""Checks of a table's or figure's columns against its grid: a case or ``absent`` setting that
matches no grid point (a mistyped value would act nowhere, without a word), and a column absent
from every point of its table (it would have no cell at all)."""

from __future__ import annotations

from fedkd.echo import safe_text, shown
from fedkd.report.targets import LAYOUTS


def column_errors(plan, where: str, layout, columns: dict, points: list[dict]) -> list[str]:
    errors = []
    for label, column in columns.items():
        if not isinstance(column, dict) or not column.get("absent"):
            continue
        at = f"{where}.columns.{safe_text(label)}.absent"
        if "absent" not in layout.options:
            takes = [n for n, lay in LAYOUTS.items() if "absent" in lay.options]
            errors.append(
                f"{at}: layout {layout.name} shows every column at every grid point; a column "
                f"absent from some goes in layouts {', '.join(takes)}"
            )
        elif points and all(plan.column_variants(column, p) == [] for p in points):
            errors.append(
                f"{at}: the column is absent from every grid point of the table, so it has no "
                "cell; remove the column, or the setting that covers the grid"
            )
    return errors + _dead_settings(plan, where, columns, points)


def _dead_settings(plan, where: str, columns: dict, points: list[dict]) -> list[str]:
    """A column's case or absent setting that matches no grid point of any table or figure. (A
    column shared by YAML anchor among tables may hold settings for the others' points.)"""
    settings = [
        (label, column, kind, i, setting)
        for label, column in columns.items()
        if isinstance(column, dict)
        for kind in ("cases", "absent")
        for i, setting in enumerate(column.get(kind, []))
    ]
    if not settings or not points:
        return []
    every = [p for name in plan.outputs for p in plan.grid_points(name)]
    run_keys = [{**plan.keys_of(p["dataset"]), **p} for p in points]
    errors = []
    for label, column, kind, i, setting in settings:
        at = [p for p in every if plan.case_matches(setting, p)]
        if kind == "cases" and at and not any(plan.column_variants(column, p) for p in at):
            errors.append(
                f"{where}.columns.{safe_text(label)}.cases[{i}] matches only grid points where "
                "the column is absent, so it picks no variant; remove the case, or the absent "
                "setting"
            )
        if not at:
            keys = [k for k in setting if k != "variant"]
            grid = "; ".join(
                f"{k} {', '.join(dict.fromkeys(str(r.get(k)) for r in run_keys))}" for k in keys
            )
            written = "{" + ", ".join(f"{k}: {shown(setting[k])}" for k in keys) + "}"
            does = "pick its variant" if kind == "cases" else "have no cell"
            errors.append(
                f"{where}.columns.{safe_text(label)}.{kind}[{i}]: {written} matches no grid "
                f"point of any table or figure (this one's: {grid}); give the values of a point "
                f"it should {does} at"
            )
    return errors
