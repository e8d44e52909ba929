"""The claims page in HTML: an index of every claim (verdict, id, the effect that decides it with
its interval, a link), then one block per claim with runs, then one line per claim without."""

from __future__ import annotations

import html

from fedkd.report.claims.compare import Comparison
from fedkd.report.claims.page import (
    OWN_SECTION,
    PAPERS_SECTION,
    READ_LINE,
    ClaimView,
    seeds_text,
    split_declared,
)
from fedkd.report.claims.verdict import LEVEL
from fedkd.report.names import display_name
from fedkd.report.text import DASH

# the verdicts' colours (text on a light background)
COLOURS = {
    "holds": ("#14532d", "#dcfce7"),
    "contradicted": ("#7f1d1d", "#fee2e2"),
    "inconclusive": ("#713f12", "#fef3c7"),
    "too few seeds": ("#334155", "#e2e8f0"),
    "failed": ("#581c87", "#f3e8ff"),
    "not run": ("#475569", "#f8fafc"),
}
INDEX_STYLE = (
    "<style>table.index{font-size:13px;margin:.4em 0 1em}table.index td{padding:1px 8px}"
    "table.index td.stub{white-space:normal}p.read{font-size:13px;max-width:72em}</style>"
)


def html_page(views: list[ClaimView]) -> str:
    """The page; where the configuration declares claims of its own, they come first, each
    part with its own index."""
    own, papers = split_declared(views)
    out = [INDEX_STYLE, f'<p class="read">{html.escape(READ_LINE)}</p>']
    if own:
        out += [f"<h2>{html.escape(OWN_SECTION)}</h2>", *_part(own),
                f"<h2>{html.escape(PAPERS_SECTION)}</h2>"]  # fmt: skip
    return "\n".join(out + _part(papers))


def _part(views: list[ClaimView]) -> list[str]:
    """An index of ``views``, a block per claim with runs, then one line per claim without."""
    ran = [v for v in views if v.res.verdict != "not run" or v.res.rows]
    idle = [v for v in views if v not in ran]
    out = [index(views)] + [block(v) for v in ran]
    if idle:
        out.append(f"<h3 class=idle>Not run on this configuration ({len(idle)} claims)</h3>")
        out.append('<ul class="idle">' + "".join(idle_line(v) for v in idle) + "</ul>")
    return out


def stated(v) -> str:
    """What the interval shows against a stated gap, beside the badge."""
    return f" <small>{html.escape(v.versus_stated)}</small>" if v.versus_stated else ""


def badge(verdict: str) -> str:
    fg, bg = COLOURS[verdict]
    return (f'<span class="verdict" style="color:{fg};background:{bg};border:1px solid {fg}">'
            f"{html.escape(verdict)}</span>")  # fmt: skip


def index(views: list[ClaimView]) -> str:
    """One line per claim: the contradicted first, then those that hold, the other claims with
    runs, and those without."""
    order = {"contradicted": 0, "holds": 1, "not run": 3}
    ranked = sorted(views, key=lambda v: order.get(v.res.verdict, 2))  # stable: registry order
    esc = html.escape
    lines = [
        f"<tr><td>{badge(v.res.verdict)}</td>"
        f'<td class=stub><a href="#{esc(v.res.claim.id)}"><code>{esc(v.res.claim.id)}</code></a>'
        f"</td><td class=stub>{esc(_index_effect(v))}</td></tr>"
        for v in ranked
    ]
    return ('<table class="index"><thead><tr><th>Verdict</th><th class=stub>Claim</th>'
            "<th class=stub>Effect that decides, with its 95% interval</th></tr></thead><tbody>"
            + "".join(lines) + "</tbody></table>")  # fmt: skip


def _index_effect(view: ClaimView) -> str:
    if not view.res.rows:
        # its methods may have runs that no setting of the claim's compares: the reason says
        return view.res.reason
    text = view.ours()
    return f"{text}; {view.scope}" if view.scope else text


class Footnotes:
    """Numbered notes of one block: a note repeated on several rows gets one number."""

    def __init__(self):
        self.notes: list[str] = []

    def refs(self, notes: list[str]) -> str:
        numbers = []
        for note in notes:
            if note not in self.notes:
                self.notes.append(note)
            numbers.append(str(self.notes.index(note) + 1))
        numbers = list(dict.fromkeys(numbers))
        return f" <sup>{','.join(numbers)}</sup>" if numbers else ""

    def html(self) -> str:
        if not self.notes:
            return ""
        items = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return f'<ol class="notes">{items}</ol>'


def _row_notes(r: Comparison) -> list[str]:
    notes = list(r.notes)
    if r.also:
        notes.insert(0, "same runs also in " + "; ".join(r.also))
    if r.shared_with:
        notes.insert(0, "the same comparison is a row of " + ", ".join(r.shared_with))
    if r.residual is not None and r.residual.df:
        notes.append(f"variance: {r.residual.text}")
    return notes


def block(view: ClaimView) -> str:
    """One claim: the verdict and statement, the paper's gap beside ours, a table of the settings
    (numbers first, the setting last, wrapping), the settings where neither method reached the
    target on one line, the quote and the notes."""
    res, esc = view.res, html.escape
    c = res.claim
    out = [f'<section class="claim" id="{esc(c.id)}">',
           f"<h3>{badge(res.verdict)} {esc(c.statement)}</h3>"]  # fmt: skip
    meta = [f"<code>{esc(c.id)}</code>", esc(f"{display_name(c.paper)} {c.source}")]
    if res.summary:
        meta.append(esc(res.summary))
    if view.scope:
        meta.append(f"<b>{esc(view.scope)}</b>")
    out.append(f'<p class="meta">{" · ".join(meta)}</p>')
    paper = "" if view.declared else f"<b>Paper:</b> {esc(view.paper or DASH)} &nbsp; "
    out.append(f'<p class="gap">{paper}<b>Ours:</b> {esc(view.ours())}</p>')
    rows = view.all_rows()
    shown = [r for r in rows if not r.neither_reached]
    neither = [r for r in rows if r.neither_reached]
    notes = Footnotes()
    if shown:
        out.append("<table><thead><tr><th>Verdict</th><th>n</th><th>Effect</th>"
                   f"<th>{LEVEL:.0%} CI</th><th>p (claim)</th><th>p (against)</th>"
                   "<th>Paper</th><th>More seeds</th><th class=stub>Setting</th></tr></thead>"
                   "<tbody>")  # fmt: skip
        for r in shown:
            v = r.verdict
            mark = notes.refs(_row_notes(r))
            where = f"{esc(r.text)} <span class=table>[{esc(r.table)}]</span>" if r.table \
                else esc(r.text)  # fmt: skip
            if r is res.average:
                where = f"<b>{where}</b>"
            out.append(
                f"<tr><td>{badge(v.verdict)}{stated(v)}</td><td>{v.n}</td>"
                f"<td>{esc(view.effect_text(r))}</td><td>{esc(view.interval_text(r))}</td>"
                f"<td>{esc(view.p_text(v, 'holds'))}</td>"
                f"<td>{esc(view.p_text(v, 'contradicted'))}</td>"
                f"<td>{esc(view.paper_cell(r))}</td><td>{esc(seeds_text(v))}</td>"
                f"<td class=stub>{where}{mark}</td></tr>"
            )
        out.append("</tbody></table>")
    if neither:
        settings = "; ".join(f"{r.text} [{r.table}]" for r in neither)
        out.append(f'<p class="note"><b>Neither reached T</b> on any seed ({len(neither)} '
                   f"setting{'s' if len(neither) > 1 else ''}: {esc(settings)}): "
                   f"{badge(neither[0].verdict.verdict)} no difference to test."
                   f"{notes.refs(sorted({n for r in neither for n in r.notes}))}</p>")  # fmt: skip
    if not rows:
        notes.refs([res.reason])
    out.append(f'<p class="quote">“{esc(c.quote)}”</p>')
    if c.note:
        out.append(f'<p class="note">Formalised so: {esc(c.note)}.</p>')
    if view.paper_status and view.paper_status != "holds":
        out.append(f'<p class="note">On the paper\'s own cells: {esc(view.paper_status)}.</p>')
    out.append(notes.html())
    out.append("</section>")
    return "\n".join(x for x in out if x)


def idle_line(view: ClaimView) -> str:
    """A claim without runs: its statement and why, on one line."""
    c, esc = view.res.claim, html.escape
    return (f'<li id="{esc(c.id)}">{esc(c.statement)} <code>{esc(c.id)}</code>: '
            f"{esc(view.res.reason)}</li>")  # fmt: skip
