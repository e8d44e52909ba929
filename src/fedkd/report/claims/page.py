"""The claims page: each claim's result as CSV records, Markdown/LaTeX rows and an HTML block."""

from __future__ import annotations

import html
import math

import pandas as pd

from fedkd.report.claims.compare import Comparison
from fedkd.report.claims.evaluate import ClaimResult
from fedkd.report.claims.evaluate import number_text as _num
from fedkd.report.claims.verdict import (
    LEVEL,
    MAX_SEEDS,
    MIN_SEEDS,
    POWER,
    VERDICTS,
    Verdict,
    sign_test_seeds,
)
from fedkd.report.names import display_name
from fedkd.report.options import Options
from fedkd.report.tables.common import caption_and_label
from fedkd.report.text import DASH, Text
from fedkd.report.writers import TableDoc

CSV_COLUMNS = [
    "claim", "paper", "statement", "source", "quote", "test", "margin", "aggregate",
    "claim_verdict", "claim_summary", "paper_check", "paper_effect", "row", "table",
    "also_in", "setting", "dataset", "stand_in_for", "metric", "unit", "direction", "n",
    "failed", "seeds", "effect", "sd", "ci_low", "ci_high", "p_holm", "verdict",
    "seeds_needed", "paper_gap", "stated_gap", "shared_with", "note",
]  # fmt: skip
# the verdicts' colours in the HTML (text on a light background)
COLOURS = {
    "holds": ("#14532d", "#dcfce7"),
    "contradicted": ("#7f1d1d", "#fee2e2"),
    "inconclusive": ("#713f12", "#fef3c7"),
    "too few seeds": ("#334155", "#e2e8f0"),
    "failed": ("#581c87", "#f3e8ff"),
    "not run": ("#475569", "#f8fafc"),
}

METHOD_NOTE = (
    "How to read it. Each row pairs the claim's two methods by seed within one setting: runs "
    "with the same seed share their data partition, so the per-seed difference (first method − "
    "second) removes what the partition does to both. Effect: the mean of those differences; "
    f"{LEVEL:.0%} interval: the paired t-interval, mean ± t(n−1, 0.975)·sd/√n. A claim with a "
    "margin m (a bound the paper states, 'over 2.7%', or the gap 'comparable' or 'no more "
    "benefit' tolerates) "
    "states that the effect exceeds +m (superiority), exceeds −m (non-inferiority) or lies within "
    "±m (equivalence); each is two one-sided t-tests at 2.5%, whose p-values are corrected by "
    "Holm's method over the claim's settings. holds: the claimed region is shown (with one "
    "setting: the interval lies inside it); contradicted: its complement is; inconclusive: the "
    f"interval spans the margin; too few seeds: fewer than {MIN_SEEDS} paired seeds (no spread "
    "worth the name), or every seed gives the same difference (no spread to estimate: the exact "
    f"sign test decides, p = 0.5^n, and needs {sign_test_seeds()} seeds at 2.5%); failed: runs "
    "that diverged, collapsed to chance or gave a non-finite value left too few seeds; not run: "
    "the configuration has no runs for it, or one method has runs in the setting and the other "
    "none (named in its note). A gap the paper states as its measurement ('by 5.6%', not "
    "'over') is tested as that, not as a bound to clear (stated gap, shown in the Paper column): "
    "holds when the effect is shown above 0 and not shown below the stated gap, contradicted when "
    "it is shown below it. A claim holds when every "
    "setting holds (or, for a claim on the average over settings, when the average does: the "
    "per-seed mean over the settings, tested over the seeds); it is contradicted when any setting "
    "is. A trend row tests the per-seed change of the gap between the two extreme settings "
    "(difference of differences, seeds paired by their index). Seeds for 80% power: how many "
    f"seeds a one-sided t-test at 2.5%/k (k: the claim's settings) needs for {POWER:.0%} power "
    "if the observed effect and spread were the truth (noncentral t), left out where no spread "
    f"is known; above {MAX_SEEDS} it says > {MAX_SEEDS}. Paper: the paper's own gap in the same "
    "setting, where it prints both cells (where two of its tables print the setting, the one "
    "naming more of its keys). Units: pp = percentage points of test accuracy; rounds; "
    "F = forgetting."
)


def claims_doc(results: list[ClaimResult], opts: Options) -> TableDoc:
    """The claims page of the evaluated claims: CSV, Markdown/LaTeX rows and the HTML blocks."""
    views = [ClaimView(res) for res in results]
    records = [r for view in views for r in view.records()]
    caption, label = caption_and_label(opts)
    caption = f"{caption.rstrip()} {summary(results)}".strip()
    header = [Text.plain(h) for h in ("Claim / setting", "Verdict", "n", "Effect",
                                      f"{LEVEL:.0%} CI", "Paper", "Seeds for 80% power")]  # fmt: skip
    body = [line for view in views for line in view.lines()]
    notes = [METHOD_NOTE]
    csv = pd.DataFrame(records, columns=CSV_COLUMNS)
    for col in ("seeds_needed", "n", "failed"):
        csv[col] = csv[col].astype("Int64")  # counts: "4", not "4.0"
    # the claims with runs first; those without are one line each, after them
    ran = [v for v in views if v.res.verdict != "not run" or v.res.rows]
    idle = [v for v in views if v not in ran]
    page = "\n".join(v.html() for v in ran)
    if idle:
        page += f"\n<h3 class=idle>Not run on this configuration ({len(idle)} claims)</h3>\n"
        page += '<ul class="idle">' + "".join(v.html_line() for v in idle) + "</ul>"
    return TableDoc(caption, label, header, body, 1, csv, blank_repeats=False, notes=notes,
                    html=page)  # fmt: skip


class ClaimView:
    """One evaluated claim written out: CSV records, Markdown/LaTeX rows, an HTML block."""

    def __init__(self, res: ClaimResult):
        self.res = res

    @property
    def paper_status(self) -> str:
        check = self.res.paper_check
        return check.status if check.status != "fails" else f"fails: {check.reason}"

    @property
    def paper_effect(self) -> float:
        return self.res.paper_check.effect

    @property
    def paper(self) -> str:
        """The paper's own gap, as text."""
        claim, check = self.res.claim, self.res.paper_check
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

    # ------------------------------------------------------------------ output
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
        p_holm = nan if v is None else v.p_holds
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
            "effect": nan if v is None else v.effect, "sd": nan if v is None else v.sd,
            "ci_low": nan if v is None else v.ci_low, "ci_high": nan if v is None else v.ci_high,
            "p_holm": p_holm, "verdict": "not run" if v is None else v.verdict,
            "seeds_needed": None if v is None else v.seeds_needed,
            "paper_gap": nan if r is None or r.paper_gap is None else r.paper_gap,
            "stated_gap": r.margin if r is not None and c.test == "stated-gap" else nan,
            "shared_with": "" if r is None else "; ".join(r.shared_with),
            "note": self.res.reason if r is None else "; ".join(r.notes),
        }  # fmt: skip

    def _stand_in(self, ds) -> str:
        return self.res.stand_ins.get(ds, "") if ds else ""

    def lines(self) -> list[list[Text]]:
        """The Markdown and LaTeX rows: the claim, then its settings (indented)."""
        c = self.res.claim
        head = [f"{c.statement} [{c.id}]", self.res.verdict.upper(), "", "", "", self.paper, ""]
        out = [[Text.plain(t) for t in head]]
        rows = list(self.res.rows) + ([self.res.average] if self.res.average else [])
        for r in rows:
            v = r.verdict
            out.append([Text.plain(t) for t in (
                f"  {r.text}" + (f" [{r.table}]" if r.table else ""), v.verdict, str(v.n),
                self._effect(v.effect), self._interval(v), self._paper_cell(r),
                _seeds_text(v),
            )])  # fmt: skip
        if not rows:
            out.append([Text.plain(t) for t in (f"  ({self.res.reason})", "not run", "0", DASH,
                                                DASH, "", "")])  # fmt: skip
        return out

    def _num(self, x, signed=True) -> str:
        return _num(x, self.res.claim.unit, signed)

    def _paper_cell(self, r: Comparison) -> str:
        """The paper's gap in the row's setting and, for a stated gap, the gap tested: "+5.62
        (stated 5.6)"."""
        text = self._num(r.paper_gap)
        if self.res.claim.test != "stated-gap":
            return text
        return f"{text} (stated {r.margin})" if text != DASH else f"stated {r.margin}"

    def _effect(self, x) -> str:
        text = self._num(x)
        return text if text == DASH else f"{text} {self.res.claim.unit}"

    def _interval(self, v: Verdict) -> str:
        if math.isnan(v.ci_low):
            return DASH
        return f"[{self._num(v.ci_low)}, {self._num(v.ci_high)}]"

    def html(self) -> str:
        """One block: the verdict and statement, the paper's gap beside ours, then a table of the
        settings (verdict, n, effect, interval first; the setting last, wrapping), and notes."""
        c, esc = self.res.claim, html.escape
        out = [f'<section class="claim" id="{esc(c.id)}">',
               f"<h3>{_badge(self.res.verdict)} {esc(c.statement)}</h3>"]  # fmt: skip
        meta = [f"<code>{esc(c.id)}</code>", esc(f"{display_name(c.paper)} {c.source}")]
        if self.res.summary:
            meta.append(esc(self.res.summary))
        out.append(f'<p class="meta">{" · ".join(meta)}</p>')
        ours = self._ours()
        out.append(f'<p class="gap"><b>Paper:</b> {esc(self.paper or DASH)} &nbsp; '
                   f"<b>Ours:</b> {esc(ours)}</p>")  # fmt: skip
        rows = list(self.res.rows) + ([self.res.average] if self.res.average else [])
        notes: list[str] = []
        if rows:
            out.append("<table><thead><tr><th>Verdict</th><th>n</th><th>Effect</th>"
                       f"<th>{LEVEL:.0%} CI</th><th>Paper</th><th>p (Holm)</th>"
                       "<th>Seeds for 80% power</th><th class=stub>Setting</th></tr></thead>"
                       "<tbody>")  # fmt: skip
            for r in rows:
                v = r.verdict
                refs = []
                row_notes = list(r.notes)
                if r.also:
                    row_notes.insert(0, "same runs also in " + "; ".join(r.also))
                if r.shared_with:
                    row_notes.insert(0, "the same comparison is a row of " +
                                     ", ".join(r.shared_with))  # fmt: skip
                for note in row_notes:
                    notes.append(note)
                    refs.append(str(len(notes)))
                mark = f" <sup>{','.join(refs)}</sup>" if refs else ""
                where = f"{esc(r.text)} <span class=table>[{esc(r.table)}]</span>" if r.table \
                    else esc(r.text)  # fmt: skip
                if r is self.res.average:
                    where = f"<b>{where}</b>"
                out.append(
                    f"<tr><td>{_badge(v.verdict)}</td><td>{v.n}</td>"
                    f"<td>{esc(self._effect(v.effect))}</td><td>{esc(self._interval(v))}</td>"
                    f"<td>{esc(self._paper_cell(r))}</td><td>{_p_text(v.p_holds)}</td>"
                    f"<td>{esc(_seeds_text(v))}</td><td class=stub>{where}{mark}</td></tr>"
                )
            out.append("</tbody></table>")
        else:
            notes.append(self.res.reason)
        quote = f"“{esc(c.quote)}”"
        out.append(f'<p class="quote">{quote}</p>')
        if c.note:
            out.append(f'<p class="note">Formalised so: {esc(c.note)}.</p>')
        if self.paper_status and self.paper_status != "holds":
            out.append(f'<p class="note">On the paper\'s own cells: {esc(self.paper_status)}.</p>')
        if notes:
            out.append('<ol class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes)
                       + "</ol>")  # fmt: skip
        out.append("</section>")
        return "\n".join(out)

    def html_line(self) -> str:
        """A claim without runs: its statement and why, on one line."""
        c, esc = self.res.claim, html.escape
        return (f'<li id="{esc(c.id)}">{esc(c.statement)} <code>{esc(c.id)}</code>: '
                f"{esc(self.res.reason)}</li>")  # fmt: skip

    def _ours(self) -> str:
        row = self.res.average or (self.res.rows[0] if len(self.res.rows) == 1 else None)
        if row is not None and row.verdict and row.verdict.n:
            v = row.verdict
            text = self._effect(v.effect)
            if not math.isnan(v.ci_low):
                text += f" {self._interval(v)}"
            return text + (" (average over settings)" if row is self.res.average else "")
        effects = [r.verdict.effect for r in self.res.rows if r.verdict and r.verdict.n]
        if not effects:
            return "no runs" if not self.res.rows else "no valid pairs"
        return f"from {self._num(min(effects))} to {self._num(max(effects))} {self.res.claim.unit}"


def _seeds_text(v: Verdict) -> str:
    if v.seeds_needed is None:
        return ""
    return f"> {MAX_SEEDS}" if v.seeds_needed > MAX_SEEDS else str(v.seeds_needed)


def _p_text(p: float) -> str:
    if p is None or math.isnan(p):
        return DASH
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _badge(verdict: str) -> str:
    fg, bg = COLOURS[verdict]
    return (f'<span class="verdict" style="color:{fg};background:{bg};border:1px solid {fg}">'
            f"{html.escape(verdict)}</span>")  # fmt: skip


def summary(results: list[ClaimResult]) -> str:
    """E.g. "Of 36 claims: 12 hold, 2 contradicted, ...; 3 comparisons are rows of several
    claims." (per claim, not per row)."""
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    text = f"Of {len(results)} claims: " + ", ".join(f"{counts[v]} {_plural(v, counts[v])}"
                                                     for v in VERDICTS)  # fmt: skip
    shared = {r.key for res in results for r in res.rows if r.shared_with}
    if shared:
        text += (f"; {len(shared)} comparison{'s are rows' if len(shared) > 1 else ' is a row'} "
                 "of more than one claim (named in its notes)")  # fmt: skip
    return text + "."


def _plural(verdict: str, n: int) -> str:
    return "hold" if verdict == "holds" and n != 1 else verdict
