"""Caption sentences about how a table's methods were run: where the papers' released code differs
from their text (FedDistill+'s distillation target), and where a column is not run by design
(``absent``, an empty cell)."""

from __future__ import annotations


def strategy_notes(plan, name: str, own: bool = True) -> list[str]:
    """One sentence per such method among the output's columns; with ``own`` (the output's own
    caption, not a comparison drawn from it) one on its absent columns."""
    targets: dict[str, set[str]] = {}
    for point in plan.grid_points(name):
        for column in (plan.outputs[name].get("columns") or {}).values():
            for variant in plan.column_variants(column, point):
                spec = plan.point_spec(point, variant)
                if spec["strategy"] == "feddistill+":
                    targets.setdefault("feddistill+", set()).add(
                        str(spec["params"].get("target", "global"))
                    )
    notes = []
    if "feddistill+" in targets:
        used = (
            "uniform outputs" if targets["feddistill+"] == {"uniform"}
            else "FedGen's target (the default)"
        )  # fmt: skip
        notes.append(
            f"FedDistill+ distils toward {used}; the FedGKD repository's released code "
            "effectively distilled toward uniform outputs, which `target: uniform` reproduces"
        )
    absent = plan.absent(name) if own else {}
    if absent:
        from fedkd.report.names import display_name
        from fedkd.report.text import format_key_value, key_header

        shown = (plan.outputs[name].get("options") or {}).get("column_names") or {}
        by_where: dict[str, list[str]] = {}  # columns absent from the same settings, together
        for label, at in absent.items():
            where = " or ".join(
                ", ".join(
                    f"{key_header(k).md} = {format_key_value(k, v, None)}" for k, v in s.items()
                )
                for s in at
            )
            by_where.setdefault(where, []).append(str(shown.get(label, display_name(label))))
        said = "; ".join(f"{', '.join(labels)} at {where}" for where, labels in by_where.items())
        notes.append(f"An empty cell is one the configuration does not run ({said})")
    return notes
