"""The claims page: each evaluated claim as CSV records and Markdown/LaTeX rows (this module) and
as an HTML block under an index of every claim (page_html.py), framed by a TableDoc that
fedkd.report.writers writes out like any other table."""

from __future__ import annotations

import math

import pandas as pd

from fedkd.report.claims.claim import DECLARED
from fedkd.report.claims.compare import Comparison
from fedkd.report.claims.evaluate import ClaimResult
from fedkd.report.claims.evaluate import number_text as _num
from fedkd.report.claims.verdict import (
    ALPHA,
    LEVEL,
    MAX_SEEDS,
    MIN_SEEDS,
    POWER,
    POWER_MIN_SEEDS,
    VERDICTS,
    Verdict,
)
from fedkd.report.options import Options
from fedkd.report.tables.common import caption_and_label
from fedkd.report.text import DASH, Text
from fedkd.report.writers import TableDoc

CSV_COLUMNS = [
    "claim", "paper", "statement", "source", "quote", "test", "margin", "aggregate",
    "claim_verdict", "claim_summary", "paper_check", "paper_effect", "row", "table",
    "also_in", "setting", "dataset", "stand_in_for", "metric", "unit", "direction", "n",
    "failed", "seeds", "effect", "se", "df", "sd", "step", "variance_from", "ci_low",
    "ci_high", "p_holds", "p_contradicted", "p_adjusted", "verdict", "versus_stated",
    "seeds_needed", "more_seeds", "neither_reached", "scope",
    "paper_gap", "stated_gap", "gap_fraction", "shared_with", "note",
]  # fmt: skip


def _tested(v: Verdict) -> bool:
    """Whether the row was tested: a p on either side (a bound may withhold one)."""
    return not (math.isnan(v.p_holds) and math.isnan(v.p_contradicted))


def _p(p: float) -> float:
    """A side's p as it ranks rows: one withheld (NaN) is as far from deciding as can be."""
    return 1.0 if math.isnan(p) else p


# how to read a row, in one line (the page's first note; docs/claims.md has the procedure)
READ_LINE = (
    f"How to read a row: the effect is the mean per-seed difference (first method − second); "
    f"its {LEVEL:.0%} interval and both p-values are the paired t-test's on the two methods' own "
    "per-seed differences (the setting's other methods play no part). A row holds when "
    f"p (claim) ≤ {ALPHA:.3g} and is contradicted when p (against) ≤ {ALPHA:.3g}. A p marked (H) "
    "is Holm-corrected over the claim's settings: the side on which any one setting decides the "
    "claim (a contradiction of an every-setting claim); the other side needs every setting on "
    "its own and is not corrected."
)
METHOD_NOTE = (
    "The procedure. In each setting the paired t-test on the pair's per-seed differences "
    "(standard error sd/√n, n−1 degrees of freedom; runs of one seed share partition and client "
    "sampling), the sd taken as at least one step of the measurement (one test example: "
    "100/test-set size pp), so that differences coinciding within it show no smaller spread. "
    "It assumes the differences roughly normal; where the noisier method's noise is skewed (a "
    "run usually a little ahead, sometimes far behind), its level is above the nominal 2.5% "
    "(docs/claims.md gives the figures). The setting's seed-to-seed variance (the residual "
    "mean square of its method × seed layout, every method) is shown as a diagnostic only. Each claim is one pre-specified contrast, "
    "so no many-to-one correction applies. Hypotheses: superiority (the effect exceeds +m), "
    "non-inferiority (exceeds −m), equivalence (within ±m), stated gap (a gap g the paper "
    "measured, 'by 5.6%' or 'over 2.7%' where 2.7 is its own gap: reproduced when the effect is "
    "shown above the fraction of g the row gives, 0.5 unless the claim says; the row says "
    "'larger than stated' or 'smaller than stated' where the interval lies wholly above or "
    "below g); each is two one-sided t-tests at 2.5% (the two regions outside an equivalence "
    "Bonferroni-corrected together). Over settings: 'in every setting' holds "
    "when every setting holds (intersection-union, no correction) and is contradicted when some "
    "setting is shown on the other side (Holm over the settings); 'on average' is one test on "
    "the per-seed means of the settings' differences (which carries the covariance of settings "
    "sharing seeds), the setting rows only describing; a trend is, per seed, the change of the "
    f"gap between two settings, tested the same way. too few seeds: fewer than {MIN_SEEDS} "
    "paired seeds, or a seed of the setting without a pair (a claim never holds on a subset of "
    "its seeds); failed: a run with no value to compare (non-finite, or stopped before its "
    "first round). A run that collapsed or diverged counts with what it reached (a "
    "non-inferiority or an equivalence must hold without the collapsed runs too); one an error "
    "stopped has no result until it resumes. Bounds: a target not reached counts as R + 1 "
    "rounds, the fewest it could need, and a column tuned on the test values compared looks "
    "better than it is; a verdict the truth beyond such a bound could undo is not given (the "
    "row's note says so). More seeds: "
    f"for an unresolved row with at least {POWER_MIN_SEEDS} seeds, the seeds at which the test "
    f"would have {POWER:.0%} power were the observed effect and sd the truth (equivalence: both "
    f"one-sided tests together; above {MAX_SEEDS}: > {MAX_SEEDS}); with fewer seeds such a "
    "figure is noise, and the row says 'more seeds needed'. Paper: the paper's own gap in the "
    "same setting, where it prints both cells. Units: pp = percentage points of test accuracy; "
    "rounds; F = forgetting."
)


def claims_doc(views: list[ClaimView], opts: Options) -> TableDoc:
    """The claims table of the evaluated claims: CSV and Markdown/LaTeX rows (the HTML page,
    page_html.html_page, is set by the layout)."""
    own, papers = split_declared(views)
    records = [r for view in (*own, *papers) for r in view.records()]
    caption, label = caption_and_label(opts)
    counts = summary([v.res for v in papers])
    if own:
        counts = (f"This configuration's {summary([v.res for v in own])} The papers' "
                  f"{counts}")  # fmt: skip
    caption = f"{counts} {caption.rstrip()}".strip()  # the counts first
    header = [Text.plain(h) for h in ("Claim / setting", "Verdict", "n", "Effect",
                                      f"{LEVEL:.0%} CI", "p (claim)", "p (against)", "Paper",
                                      "More seeds")]  # fmt: skip
    body = [line for view in papers for line in view.lines()]
    if own:
        blank = [Text.plain("")] * (len(header) - 1)
        body = [[Text.plain(OWN_SECTION), *blank],
                *(line for view in own for line in view.lines()),
                [Text.plain(PAPERS_SECTION), *blank], *body]  # fmt: skip
    csv = pd.DataFrame(records, columns=CSV_COLUMNS)
    for col in ("seeds_needed", "n", "failed", "df"):
        csv[col] = csv[col].astype("Int64")  # counts: "4", not "4.0"
    return TableDoc(caption, label, header, body, 1, csv, blank_repeats=False,
                    notes=[READ_LINE, METHOD_NOTE], long_columns=LONG_COLUMNS)  # fmt: skip


# the claim, the paper's gap and the seeds figure wrap; on a landscape page the rest fits as it is
LONG_COLUMNS = (r"p{0.3\linewidth}", "l", "r", "r", "l", "r", "r", r"p{0.12\linewidth}",
                r"p{0.07\linewidth}")  # fmt: skip


# the page's two sections where a configuration declares claims of its own
OWN_SECTION = "This configuration's claims"
PAPERS_SECTION = "The papers' claims"


def split_declared(views: list[ClaimView]) -> tuple[list[ClaimView], list[ClaimView]]:
    """(the configuration's own claims, the papers'), each in its order."""
    own = [v for v in views if v.declared]
    return own, [v for v in views if not v.declared]


class ClaimView:
    """One evaluated claim written out: CSV records, Markdown/LaTeX rows, an HTML block."""

    def __init__(self, res: ClaimResult):
        self.res = res

    @property
    def declared(self) -> bool:
        """A claim of the configuration's own: no paper to show beside it."""
        return self.res.claim.paper == DECLARED

    @property
    def paper_status(self) -> str:
        if self.declared:
            return ""
        check = self.res.paper_check
        return check.status if check.status != "fails" else f"fails: {check.reason}"

    @property
    def paper_effect(self) -> float:
        return self.res.paper_check.effect

    @property
    def paper(self) -> str:
        """The paper's own gap, as text."""
        claim, check = self.res.claim, self.res.paper_check
        if self.declared:
            return ""
        if check.status == "uncheckable":
            return f"no cells to compare ({check.reason})"
        unit = claim.unit
        stated = claim.margin_text()
        n = len(check.gaps)
        if claim.trend is not None:
            text = f"the gap changes by {_num(check.effect, unit)} {unit} (mean over its settings)"
        elif claim.aggregate == "mean" or n == 1:
            text = f"{_num(check.effect, unit)} {unit}" + (
                f" (mean of {n} settings)" if n > 1 else ""
            )
        else:
            gaps = [g.gap for g in check.gaps]
            text = f"from {_num(min(gaps), unit)} to {_num(max(gaps), unit)} {unit} ({n} settings)"
        if stated and claim.test == "superiority":
            text += f"; stated: {stated}"
        elif claim.test == "stated-gap":
            text += f"; stated gap: {stated}"
        return text

    @property
    def scope(self) -> str:
        """E.g. "tested on 2 of the paper's 4 settings"; "" where all are, or it is unknown."""
        if self.res.scope is None:
            return ""
        tested, total = self.res.scope
        return "" if tested >= total else f"tested on {tested} of the paper's {total} settings"

    def all_rows(self) -> list[Comparison]:
        return list(self.res.rows) + ([self.res.average] if self.res.average else [])

    def deciding(self) -> tuple[Comparison | None, str]:
        """The row whose numbers decide the claim, and how it stands for it: the average (a claim
        on the average), the one row, or for a claim on every setting the row shown on the
        other side (contradicted) or else its weakest row (the largest p (claim))."""
        res = self.res
        if res.average is not None:
            return res.average, "average"
        tested = [r for r in res.rows if r.verdict and _tested(r.verdict)]
        if len(res.rows) == 1:
            return res.rows[0], ""
        if not tested:
            return None, ""
        k = len(res.rows)
        if res.claim.aggregate == "any":
            best = min(tested, key=lambda r: _p(r.verdict.p_holds))
            return best, f"strongest of {k} settings"
        against = [r for r in tested if r.verdict.verdict == "contradicted"]
        if against:
            return min(against, key=lambda r: r.verdict.p_contradicted), f"1 of {k} settings"
        return max(tested, key=lambda r: _p(r.verdict.p_holds)), f"weakest of {k} settings"

    # ------------------------------------------------------------------ CSV
    def records(self) -> list[dict]:
        rows = [("setting" if self.res.claim.trend is None else "trend", r) for r in self.res.rows]
        if self.res.average is not None:
            rows.append(("average", self.res.average))
        if not rows:
            return [self._record("none", None)]
        return [self._record(kind, r) for kind, r in rows]

    def _record(self, kind: str, r: Comparison | None) -> dict:
        c = self.res.claim
        v = r.verdict if r is not None else None
        ds = None if r is None or not r.setting else str(r.setting.get("dataset"))
        nan = math.nan
        return {
            "claim": c.id, "paper": c.paper, "statement": c.statement, "source": c.source,
            "quote": c.quote, "test": c.test, "margin": c.margin_text(),
            "aggregate": c.aggregate, "claim_verdict": self.res.verdict,
            "claim_summary": self.res.summary, "paper_check": self.paper_status,
            "paper_effect": self.paper_effect, "row": kind,
            "table": "" if r is None else r.table,
            "also_in": "" if r is None else "; ".join(r.also),
            "setting": DASH if r is None else r.text, "dataset": ds,
            "stand_in_for": "" if r is None else self._stand_in(ds),
            "metric": c.metric, "unit": c.unit, "direction": c.direction,
            "n": 0 if v is None else v.n, "failed": 0 if r is None else r.failed,
            "seeds": "" if r is None else ";".join(map(str, sorted(r.diffs))),
            "effect": nan if v is None else v.effect, "se": nan if v is None else v.se,
            "df": 0 if v is None else v.df,
            "sd": nan if v is None else v.sd, "step": nan if v is None else v.step,
            "variance_from": "" if r is None or r.residual is None else r.residual.text,
            "ci_low": nan if v is None else v.ci_low, "ci_high": nan if v is None else v.ci_high,
            "p_holds": nan if v is None else v.p_holds,
            "p_contradicted": nan if v is None else v.p_contradicted,
            "p_adjusted": "" if v is None else v.adjusted,
            "verdict": "not run" if v is None else v.verdict,
            "versus_stated": "" if v is None else v.versus_stated,
            "seeds_needed": None if v is None else v.seeds_needed,
            "more_seeds": False if v is None else v.more_seeds,
            "neither_reached": False if r is None else r.neither_reached,
            "scope": self.scope,
            "paper_gap": nan if r is None or r.paper_gap is None else r.paper_gap,
            "stated_gap": r.margin if r is not None and c.test == "stated-gap" else nan,
            "gap_fraction": c.gap_fraction if c.test == "stated-gap" else nan,
            "shared_with": "" if r is None else "; ".join(r.shared_with),
            "note": self.res.reason if r is None else "; ".join(r.notes),
        }  # fmt: skip

    def _stand_in(self, ds) -> str:
        return self.res.stand_ins.get(ds, "") if ds else ""

    # ------------------------------------------------------------------ Markdown and LaTeX
    def lines(self) -> list[list[Text]]:
        """The Markdown and LaTeX rows: the claim, then its settings (indented)."""
        c = self.res.claim
        # the paper's settings it was tested on: the verdict is about those, not beyond them
        scope = f" ({self.scope})" if self.scope else ""
        head = [f"{c.statement} [{c.id}]{scope}", self.res.verdict.upper(), "", "", "", "", "",
                self.paper, ""]  # fmt: skip
        out = [[Text.plain(t) for t in head]]
        rows = self.all_rows()
        for r in rows:
            v = r.verdict
            out.append([Text.plain(t) for t in (
                f"  {r.text}" + (f" [{r.table}]" if r.table else ""), verdict_text(v), str(v.n),
                self.effect_text(r), self.interval_text(r), self.p_text(v, "holds"),
                self.p_text(v, "contradicted"), self.paper_cell(r), seeds_text(v),
            )])  # fmt: skip
        if not rows:
            out.append([Text.plain(t) for t in (f"  ({self.res.reason})", "not run", "0", DASH,
                                                DASH, DASH, DASH, "", "")])  # fmt: skip
        return out

    # ------------------------------------------------------------------ cells
    def num(self, x, signed=True) -> str:
        return _num(x, self.res.claim.unit, signed)

    def paper_cell(self, r: Comparison) -> str:
        """The paper's gap in the row's setting and, for a stated gap, the gap tested: "+5.62
        (stated 5.6)"."""
        text = self.num(r.paper_gap)
        claim = self.res.claim
        if claim.test != "stated-gap":
            return text
        stated = f"stated {r.margin}; tested: above {claim.gap_fraction:g} × {r.margin}"
        return f"{text} ({stated})" if text != DASH else stated

    def effect_text(self, r: Comparison) -> str:
        if r.neither_reached:
            return "neither reached T"
        text = self.num(r.verdict.effect)
        return text if text == DASH else f"{text} {self.res.claim.unit}"

    def interval_text(self, r: Comparison) -> str:
        v = r.verdict
        if r.neither_reached or math.isnan(v.ci_low):
            return DASH
        return f"[{self.num(v.ci_low)}, {self.num(v.ci_high)}]"

    @staticmethod
    def p_text(v: Verdict, side: str) -> str:
        p = v.p_holds if side == "holds" else v.p_contradicted
        if p is None or math.isnan(p):
            return DASH
        text = "< 0.001" if p < 0.001 else f"{p:.3f}"
        return f"{text} (H)" if v.adjusted == side else text

    def ours(self) -> str:
        """The effect that decides the claim, with its interval: "+1.20 pp [+0.40, +2.00]
        (average over settings)"."""
        row, how = self.deciding()
        if row is not None and row.verdict and row.verdict.n:
            text = self.effect_text(row)
            if not math.isnan(row.verdict.ci_low) and not row.neither_reached:
                text += f" {self.interval_text(row)}"
            how = "average over settings" if how == "average" else how
            return text + (f" ({how})" if how else "")
        if self.res.rows and all(r.neither_reached for r in self.res.rows):
            return "neither method reached T"
        effects = [r.verdict.effect for r in self.res.rows if r.verdict and r.verdict.n]
        if not effects:
            return "no runs" if not self.res.rows else "no valid pairs"
        return f"from {self.num(min(effects))} to {self.num(max(effects))} {self.res.claim.unit}"


def verdict_text(v: Verdict) -> str:
    """The row's verdict, with what the interval shows against a stated gap: "holds (smaller
    than stated)"."""
    return f"{v.verdict} ({v.versus_stated})" if v.versus_stated else v.verdict


def seeds_text(v: Verdict) -> str:
    if v.more_seeds:
        return "more seeds needed"
    if v.seeds_needed is None:
        return ""
    return f"> {MAX_SEEDS}" if v.seeds_needed > MAX_SEEDS else str(v.seeds_needed)


def summary(results: list[ClaimResult]) -> str:
    """E.g. "37 claims: 12 hold, 2 contradicted, ...; 3 comparisons are rows of several
    claims." (per claim, not per row)."""
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    text = f"{len(results)} claim{'' if len(results) == 1 else 's'}: " + ", ".join(f"{counts[v]} {_plural(v, counts[v])}"
                                                  for v in VERDICTS)  # fmt: skip
    shared = {r.key for res in results for r in res.rows if r.shared_with}
    if shared:
        text += (f"; {len(shared)} comparison{'s are rows' if len(shared) > 1 else ' is a row'} "
                 "of more than one claim (named in its notes)")  # fmt: skip
    return text + "."


def _plural(verdict: str, n: int) -> str:
    return "hold" if verdict == "holds" and n != 1 else verdict
