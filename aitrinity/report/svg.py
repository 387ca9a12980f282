"""Inline SVG charts: bars, x-y lines/points (linear or log axes), bands over time, the exchange triangle.

Pure functions from numbers to SVG text, no JavaScript and no external
resources, so a report is one self-contained file that prints. Colours are the
Okabe-Ito palette (distinguishable with the common colour-vision deficiencies,
Okabe & Ito 2008), and every series also differs by marker shape or dash, so
the charts survive greyscale printing. Every mark carries ``data-*`` attributes
with its values, which the browser tests read back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
KIND_COLOURS = {
    "compute": "#0072B2",
    "memory_bandwidth": "#E69F00",
    "memory": "#E69F00",
    "link": "#009E73",
    "bandwidth": "#009E73",
    "host": "#CC79A7",
    "bubble": "#999999",
}
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4")
MARKERS = ("circle", "square", "triangle", "diamond", "cross", "star")

W, H = 640, 320
LEFT, RIGHT, TOP, BOTTOM = 92, 30, 28, 48


def colour(i: int) -> str:
    return OKABE_ITO[i % len(OKABE_ITO)]


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _open(chart: str, title: str, width: int = W, height: int = H) -> list[str]:
    return [
        f'<svg class="chart" data-chart="{escape(chart)}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]


def marker(kind: str, x: float, y: float, fill: str, r: float = 4.5, attrs: str = "") -> str:
    """A point mark of one of :data:`MARKERS`."""
    if kind == "square":
        side = _num(2 * r)
        return f'<rect x="{_num(x - r)}" y="{_num(y - r)}" width="{side}" height="{side}" fill="{fill}"{attrs}/>'
    if kind in ("triangle", "diamond", "star", "cross"):
        if kind == "triangle":
            pts = [(x, y - r * 1.2), (x + r * 1.1, y + r * 0.8), (x - r * 1.1, y + r * 0.8)]
        elif kind == "diamond":
            pts = [(x, y - r * 1.3), (x + r, y), (x, y + r * 1.3), (x - r, y)]
        else:  # cross / star: a plus-shaped polygon
            a, b = r * 1.2, r * 0.4
            pts = [
                (x - b, y - a), (x + b, y - a), (x + b, y - b), (x + a, y - b), (x + a, y + b), (x + b, y + b),
                (x + b, y + a), (x - b, y + a), (x - b, y + b), (x - a, y + b), (x - a, y - b), (x - b, y - b),
            ]  # fmt: skip
        path = " ".join(f"{_num(px)},{_num(py)}" for px, py in pts)
        return f'<polygon points="{path}" fill="{fill}"{attrs}/>'
    return f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(r)}" fill="{fill}"{attrs}/>'


# -- axes ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    low: float
    high: float
    log: bool = False
    label: str = ""
    fmt: Callable[[float], str] = field(default=lambda v: f"{v:g}")

    @staticmethod
    def fit(values: Sequence[float], log: bool = False, label: str = "", pad: float = 0.05, **kw: object) -> Axis:
        vals = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
        if not vals:
            vals = [1.0]
        lo, hi = min(vals), max(vals)
        if log:
            lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
            if lo == hi:
                hi = lo * 10
        else:
            if lo > 0 and lo < 0.5 * hi:
                lo = 0.0
            span = (hi - lo) or abs(hi) or 1.0
            lo, hi = lo - pad * span * (lo != 0), hi + pad * span
        return Axis(lo, hi, log, label, **kw)  # type: ignore[arg-type]

    def frac(self, v: float) -> float:
        if self.log:
            v = max(v, self.low)
            return (math.log10(v) - math.log10(self.low)) / (math.log10(self.high) - math.log10(self.low))
        return (v - self.low) / ((self.high - self.low) or 1.0)

    def ticks(self) -> list[float]:
        if self.log:
            a, b = round(math.log10(self.low)), round(math.log10(self.high))
            step = max(1, math.ceil((b - a) / 8))
            return [10.0**k for k in range(a, b + 1, step)]
        span = self.high - self.low
        raw = span / 6 if span > 0 else 1.0
        mag = 10 ** math.floor(math.log10(raw))
        step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=mag * 10)
        first = math.ceil(self.low / step) * step
        return [first + k * step for k in range(int((self.high - first) / step + 1e-9) + 1)]


@dataclass(frozen=True)
class Frame:
    x: Axis
    y: Axis
    width: int = W
    height: int = H

    def px(self, v: float) -> float:
        return LEFT + self.x.frac(v) * (self.width - LEFT - RIGHT)

    def py(self, v: float) -> float:
        return self.height - BOTTOM - self.y.frac(v) * (self.height - TOP - BOTTOM)

    def axes(self) -> list[str]:
        out = ['<g class="axes" font-size="11" fill="#222">']
        x0, x1, y0, y1 = LEFT, self.width - RIGHT, self.height - BOTTOM, TOP
        for t in self.x.ticks():
            x = self.px(t)
            out.append(f'<line x1="{_num(x)}" y1="{y0}" x2="{_num(x)}" y2="{y1}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{_num(x)}" y="{y0 + 15}" text-anchor="middle">{escape(self.x.fmt(t))}</text>')
        for t in self.y.ticks():
            y = self.py(t)
            out.append(f'<line x1="{x0}" y1="{_num(y)}" x2="{x1}" y2="{_num(y)}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{x0 - 6}" y="{_num(y + 4)}" text-anchor="end">{escape(self.y.fmt(t))}</text>')
        out.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#222"/>')
        out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#222"/>')
        out.append(
            f'<text x="{(x0 + x1) / 2}" y="{self.height - 8}" text-anchor="middle">{escape(self.x.label)}</text>'
        )
        out.append(
            f'<text transform="translate(14 {(y0 + y1) / 2}) rotate(-90)" text-anchor="middle">'
            f"{escape(self.y.label)}</text>"
        )
        out.append("</g>")
        return out


# -- charts ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    kind: str = ""
    strong: bool = False
    """Drawn with a heavy outline (e.g. the binding resource)."""
    note: str = ""


def bars(chart: str, title: str, groups: Sequence[tuple[str, Sequence[Bar]]], fmt: Callable[[float], str]) -> str:
    """Horizontal bars (value in [0, 1]) grouped under headings, e.g. resource utilization per phase."""
    row, head = 22, 22
    n = sum(len(b) for _, b in groups)
    height = TOP + head * len(groups) + row * n + 12
    label_w, bar_w = 260, W - 260 - 70
    out = _open(chart, title, W, height)
    y = TOP
    for g, (group, items) in enumerate(groups):
        out.append(f'<text x="4" y="{y + 15}" font-size="12" font-weight="bold">{escape(group)}</text>')
        y += head
        for b in items:
            fill = KIND_COLOURS.get(b.kind, colour(g))
            w = max(0.0, min(1.0, b.value)) * bar_w
            stroke = ' stroke="#000" stroke-width="2"' if b.strong else ""
            out.append(
                f'<text x="{label_w - 6}" y="{y + 14}" font-size="11" text-anchor="end">{escape(b.label)}</text>'
            )
            out.append(f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="{row - 6}" fill="#f2f2f2"/>')
            out.append(
                f'<rect class="bar" data-group="{escape(group)}" data-label="{escape(b.label)}" '
                f'data-value="{b.value:.6g}" x="{label_w}" y="{y + 3}" width="{_num(w)}" height="{row - 6}" '
                f'fill="{fill}"{stroke}><title>{escape(f"{group}: {b.label} {fmt(b.value)} {b.note}")}</title></rect>'
            )
            out.append(f'<text x="{label_w + bar_w + 6}" y="{y + 14}" font-size="11">{escape(fmt(b.value))}</text>')
            y += row
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    line: bool = True
    marks: bool = True
    step: bool = False
    """Draw as a step function (the value holds until the next point)."""
    labels: Sequence[str] = ()
    """One label per point (shown next to the mark)."""


def _series(f: Frame, i: int, s: Series) -> list[str]:
    """Series ``i``'s line (straight or stepped) and marks, with each mark's value and label as data attributes."""
    out: list[str] = []
    c, dash, mk = colour(i), DASHES[i % len(DASHES)], MARKERS[i % len(MARKERS)]
    pts = [(f.px(a), f.py(b)) for a, b in s.points if math.isfinite(a) and math.isfinite(b)]
    if s.line and len(pts) > 1:
        if s.step:
            path = [pts[0]]
            for p in pts[1:]:
                path += [(p[0], path[-1][1]), p]
            pts_line = path
        else:
            pts_line = pts
        d = " ".join(f"{_num(a)},{_num(b)}" for a, b in pts_line)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<polyline class="series" data-series="{escape(s.name)}" points="{d}" fill="none" stroke="{c}" '
            f'stroke-width="2"{dash_attr}/>'
        )
    if s.marks:
        for k, ((a, b), (vx, vy)) in enumerate(zip(pts, s.points, strict=False)):
            label = s.labels[k] if k < len(s.labels) else ""
            attrs = (
                f' class="point" data-series="{escape(s.name)}" data-x="{vx:.6g}" data-y="{vy:.6g}"'
                f' data-label="{escape(label)}"'
            )
            out.append(marker(mk, a, b, c, attrs=attrs + ' stroke="#fff" stroke-width="0.8"'))
            if label:
                out.append(f'<text x="{_num(a + 7)}" y="{_num(b - 6)}" font-size="11">{escape(label)}</text>')
    return out


def _legend(series: Sequence[Series]) -> list[str]:
    """One line of the legend per series: its stroke, its marker and its name."""
    out: list[str] = []
    lx, ly = LEFT + 8, TOP + 4
    out.append('<g class="legend" font-size="11">')
    for i, s in enumerate(series):
        c, dash, mk = colour(i), DASHES[i % len(DASHES)], MARKERS[i % len(MARKERS)]
        yy = ly + 14 * i
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        if s.line:
            out.append(f'<line x1="{lx}" y1="{yy}" x2="{lx + 22}" y2="{yy}" stroke="{c}" stroke-width="2"{dash_attr}/>')
        if s.marks:
            out.append(marker(mk, lx + 11, yy, c, r=3.5))
        out.append(f'<text x="{lx + 28}" y="{yy + 4}">{escape(s.name)}</text>')
    out.append("</g>")
    return out


def xy(
    chart: str,
    title: str,
    series: Sequence[Series],
    x: Axis,
    y: Axis,
    notes: Sequence[tuple[float, float, str]] = (),
    legend: bool = True,
) -> str:
    """Lines and / or points on linear or log axes, with a legend; ``notes`` are (x, y, text) annotations."""
    f = Frame(x, y)
    out = _open(chart, title)
    out += f.axes()
    for i, s in enumerate(series):
        out += _series(f, i, s)
    for nx, ny, text in notes:
        out.append(
            f'<text class="note" x="{_num(f.px(nx))}" y="{_num(f.py(ny) - 6)}" font-size="11" '
            f'font-style="italic">{escape(text)}</text>'
        )
    if legend and len(series) > 1:
        out += _legend(series)
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Band:
    start: float
    end: float
    label: str


def timeline(
    chart: str, title: str, bands: Sequence[Band], line: Series, x: Axis, y: Axis, band_title: str = ""
) -> str:
    """Coloured bands (what was chosen / what bound, over time) under a step line (e.g. the bandwidth)."""
    f = Frame(x, y)
    out = _open(chart, title)
    names = list(dict.fromkeys(b.label for b in bands))
    top, bottom = TOP, H - BOTTOM
    for b in bands:
        i = names.index(b.label)
        x0, x1 = f.px(b.start), f.px(b.end)
        out.append(
            f'<rect class="band" data-label="{escape(b.label)}" data-start="{b.start:.6g}" data-end="{b.end:.6g}" '
            f'x="{_num(x0)}" y="{top}" width="{_num(max(x1 - x0, 0.5))}" height="{bottom - top}" '
            f'fill="{colour(i + 1)}" fill-opacity="0.35"><title>{escape(b.label)}</title></rect>'
        )
    out += f.axes()
    pts = [(f.px(a), f.py(b)) for a, b in line.points]
    path = [pts[0]] if pts else []
    for p in pts[1:]:
        path += [(p[0], path[-1][1]), p]
    if path:
        path.append((f.px(x.high), path[-1][1]))
    d = " ".join(f"{_num(a)},{_num(b)}" for a, b in path)
    out.append(
        f'<polyline class="series" data-series="{escape(line.name)}" points="{d}" fill="none" stroke="#000" '
        'stroke-width="1.5"/>'
    )
    xx = float(LEFT)
    out.append('<g class="legend" font-size="11">')
    if band_title:
        out.append(f'<text x="{xx}" y="{TOP - 10}" font-weight="bold">{escape(band_title)}</text>')
        xx += 7 * len(band_title) + 10
    for i, name in enumerate(names):
        out.append(f'<rect x="{xx}" y="{TOP - 19}" width="12" height="10" fill="{colour(i + 1)}" fill-opacity="0.6"/>')
        out.append(f'<text x="{xx + 16}" y="{TOP - 10}">{escape(name)}</text>')
        xx += 6.5 * len(name) + 34
    out.append("</g></svg>")
    return "\n".join(out)


# -- the exchange triangle -------------------------------------------------------------------------

CORNERS = {"compute": (320.0, 40.0), "bandwidth": (100.0, 300.0), "memory": (540.0, 300.0)}
CENTRE = (320.0, 213.0)


@dataclass(frozen=True)
class Hop:
    source: str
    """A corner: compute, bandwidth or memory."""
    target: str
    label: str
    gain: float
    """Objective before / after (>1: better)."""


def triangle(chart: str, title: str, hops: Sequence[Hop]) -> str:
    """The compute / bandwidth / memory triangle with each exchange of a chain drawn as a numbered arrow.

    An exchange on pathway A -> B spends A to relieve B; hops along the same side
    are offset so that they stay readable.
    """
    out = _open(chart, title, W, 340)
    out.append(
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#222"/></marker></defs>'
    )
    (cx, cy), (bx, by), (mx, my) = CORNERS["compute"], CORNERS["bandwidth"], CORNERS["memory"]
    out.append(f'<polygon points="{cx},{cy} {bx},{by} {mx},{my}" fill="#fafafa" stroke="#bbb" stroke-width="1.5"/>')
    for name, (x, y) in CORNERS.items():
        c = KIND_COLOURS[name]
        out.append(f'<circle cx="{x}" cy="{y}" r="32" fill="{c}"/>')
        out.append(
            f'<text x="{x}" y="{y + 4}" font-size="10" fill="#fff" text-anchor="middle" font-weight="bold">'
            f"{escape(name)}</text>"
        )
    used: dict[frozenset[str], int] = {}
    for k, h in enumerate(hops, start=1):
        if h.source not in CORNERS or h.target not in CORNERS:
            continue
        (x0, y0), (x1, y1) = CORNERS[h.source], CORNERS[h.target]
        side = frozenset((h.source, h.target))
        n = used.get(side, 0)
        used[side] = n + 1
        # offset perpendicular to the side, towards the inside, one lane per hop on that side
        dx, dy = x1 - x0, y1 - y0
        length = math.hypot(dx, dy) or 1.0
        nx, ny = -dy / length, dx / length
        mx_, my_ = (x0 + x1) / 2, (y0 + y1) / 2
        if (CENTRE[0] - mx_) * nx + (CENTRE[1] - my_) * ny < 0:
            nx, ny = -nx, -ny
        off = 16.0 * (n + 1)
        sx, sy = x0 + dx * 0.22 + nx * off, y0 + dy * 0.22 + ny * off
        ex, ey = x0 + dx * 0.78 + nx * off, y0 + dy * 0.78 + ny * off
        out.append(
            f'<line class="hop" data-step="{k}" data-from="{h.source}" data-to="{h.target}" '
            f'data-gain="{h.gain:.6g}" x1="{_num(sx)}" y1="{_num(sy)}" x2="{_num(ex)}" y2="{_num(ey)}" '
            f'stroke="{colour(k - 1)}" stroke-width="2.5" marker-end="url(#arrow)"><title>{escape(h.label)}</title>'
            "</line>"
        )
        at = 0.3 + 0.12 * (n % 4)
        tx, ty = sx + (ex - sx) * at, sy + (ey - sy) * at
        out.append(
            f'<text x="{_num(tx)}" y="{_num(ty + 4)}" font-size="11" text-anchor="middle" paint-order="stroke" '
            f'stroke="#fafafa" stroke-width="3">{k}: {escape(_gain(h.gain))}</text>'
        )
    if not hops:
        out.append('<text x="320" y="200" text-anchor="middle" font-size="12">no exchange needed</text>')
    out.append("</svg>")
    return "\n".join(out)


def _gain(g: float) -> str:
    if not math.isfinite(g):
        return "fits"
    return f"×{g:.2f}"
