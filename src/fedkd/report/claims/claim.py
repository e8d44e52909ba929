"""One claim of a paper: what it says, where the paper says it, which runs of the configuration it
compares, and the hypothesis it states about them (direction, test, margin, over which settings).
Kept free of heavy imports: the workflow reads the registry when it plans which runs the claims
table needs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from fedkd.report.names import PAPER_DATASETS, display_name, paper_dataset_name
from fedkd.setting_match import same_value

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
TESTS = ("superiority", "non-inferiority", "equivalence", "stated-gap")
# "each": the claim holds in every setting ("consistently outperforms"); "mean": on the average
# over its settings ("outperforms", with the paper's own cells on both sides of 0); "any": in at
# least one of them ("can outperform")
AGGREGATES = ("each", "mean", "any")
PAPERS = ("fedgkd", "feddf", "fedntd", "fedcad")
# a stated gap is reproduced when the effect is shown above this fraction of it (the default of
# a claim's ``gap_fraction``)
GAP_FRACTION = 0.5
# the ``paper`` of a claim a configuration declares itself (claims/declared.py)
DECLARED = "configuration"
TREND_KEYS = ("alpha", "participation", "dataset")
KEY_SYMBOLS = {"alpha": "α", "participation": "C"}


@dataclass(frozen=True)
class Trend:
    """A claim that the gap treatment − baseline grows along a setting key: toward its ``low``
    or ``high`` values (between the two extreme values a configuration runs), or from the
    paper's dataset ``start`` to ``end`` (dataset trends)."""

    key: str
    toward: str = ""  # "low" or "high"
    start: str = ""  # dataset trends: the paper datasets the gap grows from and to
    end: str = ""

    def __post_init__(self):
        if self.key not in TREND_KEYS:
            raise ValueError(f"a trend's key must be one of {TREND_KEYS}, got {self.key!r}")
        if self.key == "dataset":
            if not (self.start in PAPER_DATASETS and self.end in PAPER_DATASETS):
                raise ValueError(
                    f"a dataset trend's start and end are the papers' datasets "
                    f"({', '.join(PAPER_DATASETS)}; a stand-in matches the one it stands for), "
                    f"got start {self.start!r}, end {self.end!r}"
                )
        elif self.toward not in ("low", "high"):
            raise ValueError(
                f"a trend along {self.key} grows toward 'low' or 'high', got {self.toward!r}"
            )

    @property
    def text(self) -> str:
        if self.key == "dataset":
            return (
                f"larger on {paper_dataset_name(self.end)} than on {paper_dataset_name(self.start)}"
            )
        symbol = KEY_SYMBOLS.get(self.key, self.key)
        return f"grows as {symbol} {'falls' if self.toward == 'low' else 'rises'}"


@dataclass(frozen=True)
class Claim:
    """``treatment`` is claimed ``direction`` (higher or lower) than ``baseline`` on ``metric``,
    by the hypothesis ``test`` against ``margin``, in the settings of the configuration's tables
    that ``tables`` selects (narrowed by ``where``): in each of them (``aggregate`` "each") or on
    their average ("mean"). ``tables`` names a config entry by its ``paper:`` key
    (fedgkd_table3), its layout (forgetting) or its name (table7); ``treatment`` and ``baseline``
    are that entry's column labels. A ``trend`` claim is about the gap itself: it grows along a
    setting key (compared between the extreme settings)."""

    id: str
    paper: str  # the paper that makes the claim: fedgkd, feddf, fedntd, fedcad; or DECLARED
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
    test: str = "superiority"
    # the gap the paper states in the claim's unit: a lower bound ("over 2.7%": superiority), the
    # gap it measured ("by 5.6%": stated-gap), or the gap a non-inferiority or equivalence claim
    # tolerates; per paper dataset where the paper states one per dataset
    margin: float | Mapping[str, float] = 0.0
    aggregate: str = "each"
    trend: Trend | None = None
    # at_round: rounds before this one are left out (FedGKD distils from round 2 on: its round 1
    # is FedAvg's, the same for every seed)
    rounds_from: int = 1
    # why the claim is formalised as it is, where that is not obvious from the quote
    note: str = ""
    # a stated-gap claim: the fraction of the stated gap the effect must be shown above
    gap_fraction: float = GAP_FRACTION

    def __post_init__(self):
        problems = []
        if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", self.id):
            problems.append("id must be lower-case words joined by '-'")
        if self.paper not in (*PAPERS, DECLARED):
            problems.append(f"paper must be one of {(*PAPERS, DECLARED)}")
        if self.direction not in DIRECTIONS:
            problems.append(f"direction must be one of {DIRECTIONS}")
        if self.metric not in METRICS:
            problems.append(f"metric must be one of {tuple(METRICS)}")
        if self.test not in TESTS:
            problems.append(f"test must be one of {TESTS}")
        if self.aggregate not in AGGREGATES:
            problems.append(f"aggregate must be one of {AGGREGATES}")
        if not self.tables or isinstance(self.tables, str):
            problems.append("tables must be a non-empty tuple of entry selectors")
        if self.treatment == self.baseline:
            problems.append("treatment and baseline must differ")
        if not self.source.strip() or not self.quote.strip():
            problems.append("source and quote are required")
        problems += self._margin_problems()
        if self.trend is not None and (self.test != "superiority" or self.aggregate != "each"):
            problems.append("a trend claim is a superiority claim in each setting")
        if self.trend is not None and self.trend.key in self.where:
            problems.append(f"a trend along {self.trend.key} cannot also fix it in 'where'")
        if (
            isinstance(self.gap_fraction, bool)
            or not isinstance(self.gap_fraction, (int, float))
            or not 0 < self.gap_fraction <= 1
        ):
            problems.append(f"gap_fraction must lie in (0, 1], got {self.gap_fraction!r}")
        elif self.gap_fraction != GAP_FRACTION and self.test != "stated-gap":
            problems.append("gap_fraction applies to a stated-gap claim only")
        if not (isinstance(self.rounds_from, int) and self.rounds_from >= 1):
            problems.append("rounds_from must be a round number >= 1")
        if problems:
            raise ValueError(f"claim {self.id!r}: " + "; ".join(problems))

    def _margin_problems(self) -> list[str]:
        margins = self.margin.values() if isinstance(self.margin, Mapping) else [self.margin]
        problems = []
        if isinstance(self.margin, Mapping):
            unknown = sorted(set(self.margin) - set(PAPER_DATASETS))
            if unknown or not self.margin:
                problems.append(
                    f"a margin per dataset is keyed by the papers' datasets "
                    f"({', '.join(PAPER_DATASETS)}); got {sorted(self.margin)}"
                )
            if self.aggregate == "mean":
                problems.append("a claim on the mean over settings takes one margin")
        for m in margins:
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not m >= 0:
                problems.append(f"margin must be a number >= 0 in the claim's unit, got {m!r}")
            elif self.test != "superiority" and m == 0:
                problems.append(
                    f"a {self.test} claim needs a margin > 0 (the gap it states or tolerates)"
                )
        return problems

    # ------------------------------------------------------------------ reading
    @property
    def unit(self) -> str:
        return METRICS[self.metric][1]

    @property
    def opposite(self) -> str:
        return "lower" if self.direction == "higher" else "higher"

    def flipped(self) -> Claim:
        """The same claim in the other direction (tests: a flipped claim must fail the paper)."""
        return replace(self, direction=self.opposite)

    def margin_text(self) -> str:
        """E.g. "0.5 pp" or "Tiny-ImageNet 5.6, CIFAR-100 1.9 pp"; "" without a margin."""
        unit = self.unit
        if isinstance(self.margin, Mapping):
            parts = [f"{paper_dataset_name(d)} {m}" for d, m in self.margin.items()]
            return f"{', '.join(parts)} {unit}"
        return f"{self.margin} {unit}" if self.margin else ""

    @property
    def statement(self) -> str:
        """E.g. "FedGKD > FedAvg (best-round test accuracy), on average over settings"."""
        t, b = display_name(self.treatment), display_name(self.baseline)
        what = METRICS[self.metric][0]
        better = ">" if self.direction == "higher" else "<"
        margin = self.margin_text()
        if self.trend is not None:
            gap = f"{t} − {b}" if self.direction == "higher" else f"{b} − {t}"
            return f"{gap} ({what}) {self.trend.text}"
        if self.test == "equivalence":
            text = f"{t} ≈ {b} within ±{margin} ({what})"
        elif self.test == "non-inferiority":
            worse = "below" if self.direction == "higher" else "above"
            text = f"{t} not {worse} {b} by more than {margin} ({what})"
        elif self.test == "stated-gap":
            share = f"{self.gap_fraction:g} × the stated gap"
            text = f"{t} {better} {b} by at least {share} {margin} ({what})"
        elif margin:
            text = f"{t} {better} {b} by more than {margin} ({what})"
        else:
            text = f"{t} {better} {b} ({what})"
        scope = {"mean": "on average over settings", "any": "in some setting"}.get(
            self.aggregate, "in every setting"
        )
        return f"{text}, {scope}"

    # ------------------------------------------------------------------ selecting runs
    def selects(self, name: str, paper_key: str | None, layout: str) -> bool:
        """Whether the config entry ``name`` (its ``paper:`` key and layout) holds this claim's
        runs; a configuration's own claim names its entries by name only."""
        if self.paper == DECLARED:
            return name in self.tables
        return any(sel in (name, paper_key, layout) for sel in self.tables)

    def accepts(self, setting: Mapping, stand_ins: Mapping[str, str]) -> bool:
        """Whether a setting (run keys) is one the claim is about."""
        for key, wanted in self.where.items():
            value = setting.get(key)
            if key == "dataset":
                if not any(stands_for(value, d, stand_ins) for d in wanted):
                    return False
            elif not any(same_value(value, w) for w in wanted):
                return False
        if isinstance(self.margin, Mapping):
            return bool(self.paper_datasets(setting.get("dataset"), stand_ins, self.margin))
        return True

    @staticmethod
    def paper_datasets(dataset, stand_ins: Mapping[str, str], among) -> list[str]:
        """The paper datasets of ``among`` that ``dataset`` is or stands for."""
        return [d for d in among if stands_for(dataset, d, stand_ins)]

    def margin_for(self, dataset, stand_ins: Mapping[str, str]) -> tuple[float, str]:
        """The margin of a setting on ``dataset`` and a note when it had to be chosen: a stand-in
        for several paper datasets with different stated gaps takes the smallest."""
        if not isinstance(self.margin, Mapping):
            return float(self.margin), ""
        found = self.paper_datasets(dataset, stand_ins, self.margin)
        if not found:
            raise ValueError(f"claim {self.id!r} states no margin for dataset {dataset!r}")
        margins = {d: float(self.margin[d]) for d in found}
        if len(set(margins.values())) == 1:
            return next(iter(margins.values())), ""
        low = min(margins, key=margins.get)
        stated = ", ".join(f"{paper_dataset_name(d)} {m:g}" for d, m in margins.items())
        note = (
            f"{dataset} stands for several datasets with different stated gaps ({stated}): the "
            f"smallest, {margins[low]:g}, is tested"
        )
        return margins[low], note


def stands_for(dataset, paper_dataset: str, stand_ins: Mapping[str, str]) -> bool:
    """``dataset`` is ``paper_dataset`` itself or a stand-in the configuration names for it (its
    ``stand_ins`` entry names the paper's dataset as the paper spells it: mnist5k: CIFAR-10)."""
    if dataset == paper_dataset:
        return True
    text, name = stand_ins.get(dataset) or "", paper_dataset_name(paper_dataset)
    # "CIFAR-10" must not match "CIFAR-100"
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text, re.IGNORECASE) is not None
