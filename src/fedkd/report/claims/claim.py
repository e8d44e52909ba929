"""One claim of a paper: what it says, where the paper says it, which runs of the configuration it
compares and in which direction. Kept free of heavy imports: the workflow reads the registry when
it plans which runs the claims table needs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from fedkd.report.names import display_name, paper_dataset_name

# what a claim measures on each run, and its unit: accuracies in percentage points (pp), rounds,
# or fedntd's forgetting measure F (a fraction)
METRICS = {
    "best": ("best-round test accuracy", "pp"),
    "final": ("final-round test accuracy", "pp"),
    "at_round": ("test accuracy at the table's rounds", "pp"),
    "drop": ("drop from the best to the final round", "pp"),
    "rounds_to_target": ("rounds to the target accuracy", "rounds"),
    "forgetting": ("forgetting F (fedntd eq. 5)", "F"),
    "local_final": ("clients' local-average accuracy, final round", "pp"),
}
DIRECTIONS = ("higher", "lower")
PAPERS = ("fedgkd", "feddf", "fedntd", "fedcad")


@dataclass(frozen=True)
class Claim:
    """``treatment`` is claimed ``direction`` (higher or lower) than ``baseline`` on ``metric``,
    in every setting of the configuration's tables that ``tables`` selects (narrowed by
    ``where``). ``tables`` names a config entry by its ``paper:`` key (fedgkd_table3), its layout
    (forgetting) or its name (table7); ``treatment`` and ``baseline`` are that entry's column
    labels."""

    id: str
    paper: str  # the paper that makes the claim: fedgkd, feddf, fedntd, fedcad
    source: str  # where: "Table 3; Sec. 5.2, Results Overview"
    quote: str  # the claim in the paper's words, verbatim (tests check it against the text)
    treatment: str
    baseline: str
    tables: tuple[str, ...]
    direction: str = "higher"
    metric: str = "best"
    # settings the claim is about: run key -> values; "dataset" takes the papers' names
    # (cifar10, sst5, ...), which a stand-in matches through the configuration's stand_ins
    where: Mapping[str, tuple] = field(default_factory=dict)

    def __post_init__(self):
        problems = []
        if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", self.id):
            problems.append("id must be lower-case words joined by '-'")
        if self.paper not in PAPERS:
            problems.append(f"paper must be one of {PAPERS}")
        if self.direction not in DIRECTIONS:
            problems.append(f"direction must be one of {DIRECTIONS}")
        if self.metric not in METRICS:
            problems.append(f"metric must be one of {tuple(METRICS)}")
        if not self.tables or isinstance(self.tables, str):
            problems.append("tables must be a non-empty tuple of entry selectors")
        if self.treatment == self.baseline:
            problems.append("treatment and baseline must differ")
        if not self.source.strip() or not self.quote.strip():
            problems.append("source and quote are required")
        if problems:
            raise ValueError(f"claim {self.id!r}: " + "; ".join(problems))

    @property
    def unit(self) -> str:
        return METRICS[self.metric][1]

    @property
    def statement(self) -> str:
        """E.g. "FedGKD > FedAvg (best-round test accuracy)"."""
        sign = ">" if self.direction == "higher" else "<"
        return (
            f"{display_name(self.treatment)} {sign} {display_name(self.baseline)} "
            f"({METRICS[self.metric][0]})"
        )

    def selects(self, name: str, paper_key: str | None, layout: str) -> bool:
        """Whether the config entry ``name`` (its ``paper:`` key and layout) holds this claim's
        runs."""
        return any(sel in (name, paper_key, layout) for sel in self.tables)

    def accepts(self, setting: Mapping, stand_ins: Mapping[str, str]) -> bool:
        """Whether a setting (run keys) is one the claim is about."""
        for key, wanted in self.where.items():
            value = setting.get(key)
            if key == "dataset":
                if not any(stands_for(value, d, stand_ins) for d in wanted):
                    return False
            elif not any(_same(value, w) for w in wanted):
                return False
        return True


def stands_for(dataset: str, paper_dataset: str, stand_ins: Mapping[str, str]) -> bool:
    """``dataset`` is ``paper_dataset`` itself or a stand-in the configuration names for it (its
    ``stand_ins`` entry names the paper's dataset as the paper spells it: mnist5k: CIFAR-10)."""
    if dataset == paper_dataset:
        return True
    text, name = stand_ins.get(dataset) or "", paper_dataset_name(paper_dataset)
    # "CIFAR-10" must not match "CIFAR-100"
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.IGNORECASE) is not None


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b
