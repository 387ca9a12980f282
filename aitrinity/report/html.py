"""One self-contained HTML page from a :class:`~aitrinity.report.build.Report`: inline CSS and SVG,
no script, no network; the report's data is embedded as JSON for machines (``#report-data``)."""

from __future__ import annotations

import json
import math
from html import escape

from aitrinity.report.figures import Cell, Figure, Report, Section, Table

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111; margin: 0 auto;
       max-width: 980px; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h2 { font-size: 18px; margin: 28px 0 6px; border-bottom: 2px solid #0072B2; padding-bottom: 2px; }
h3 { font-size: 15px; margin: 18px 0 4px; }
p.summary { font-size: 15px; background: #f4f8fb; border-left: 4px solid #0072B2; padding: 6px 10px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 6px 0; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; }
figure { margin: 10px 0 18px; page-break-inside: avoid; break-inside: avoid; }
figcaption { color: #333; font-size: 13px; margin: 2px 0 4px; }
svg.chart { max-width: 100%; height: auto; background: #fff; }
table.data { border-collapse: collapse; font-size: 12px; margin: 4px 0; }
table.data th, table.data td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
table.data th { background: #eee; } table.data td:first-child, table.data th:first-child { text-align: left; }
details > summary { cursor: pointer; color: #0072B2; font-size: 12px; }
nav ul { columns: 2; font-size: 13px; } .notes { color: #555; font-size: 13px; }
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  nav { display: none; }
  details { display: block; } details > summary { display: none; }
  details > table { display: table; }
  h2 { page-break-before: auto; break-after: avoid; }
}
"""


def _cell(v: Cell) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return str(v)
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.4e}"
    if isinstance(v, int):
        return f"{v:,}"
    return escape(v)


def table(t: Table, caption: str = "") -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in t.rows)
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f'<table class="data">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def figure(f: Figure) -> str:
    return (
        f'<figure id="{escape(f.id)}" data-kind="{escape(f.kind)}"><h3>{escape(f.title)}</h3>{f.svg}'
        f"<figcaption>{escape(f.caption)}</figcaption>"
        f"<details><summary>numbers ({len(f.table.rows)} rows)</summary>{table(f.table)}</details></figure>"
    )


def section(s: Section) -> str:
    facts = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in s.facts)
    return (
        f'<section id="{escape(s.id)}" data-kind="{escape(s.kind)}"><h2>{escape(s.scenario)}</h2>'
        f'<p class="summary">{escape(s.summary)}</p>'
        + (f'<dl class="facts">{facts}</dl>' if facts else "")
        + "".join(figure(f) for f in s.figures)
        + "</section>"
    )


def page(r: Report) -> str:
    nav = "".join(f'<li><a href="#{escape(s.id)}">{escape(s.scenario)}</a></li>' for s in r.sections)
    notes = "".join(f"<li>{escape(n)}</li>" for n in r.notes)
    data = json.dumps(r.model_dump(mode="json"), separators=(",", ":")).replace("</", "<\\/")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(r.title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{escape(r.title)}</h1>"
        f'<p class="notes">Written by trinity {escape(r.version)}. Charts use the Okabe-Ito palette; every chart\'s '
        "numbers are in the table under it.</p>"
        f"<nav><ul>{nav}</ul></nav>"
        + "".join(section(s) for s in r.sections)
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
        + f'<script type="application/json" id="report-data">{data}</script>'
        "</body></html>\n"
    )
