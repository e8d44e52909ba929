"""Caption sentences about how a table's methods were run, where the papers' released code differs
from their text (FedDistill+'s distillation target)."""

from __future__ import annotations


def strategy_notes(plan, name: str) -> list[str]:
    """One sentence per such method among the output's columns."""
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
    return notes
