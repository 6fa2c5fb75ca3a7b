"""Small inline SVG plots (no charting library: a line over runs, flagged points, a two-run histogram)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 420, 150, 48, 12, 22, 26


def _fmt(v: float, fmt: str) -> str:
    return format(v, fmt) if fmt != "%" else f"{v * 100:.1f}%"


def line(
    title: str,
    labels: Sequence[str],
    values: Sequence[float | None],
    *,
    flags: Sequence[str | None] = (),
    fmt: str = ".1f",
    links: Sequence[str | None] = (),
) -> str:
    """A line over runs (x: run labels, in order); a point with a flag (why it shifted) is drawn red and
    carries the reason in its tooltip; a point with a link opens it."""
    pts = [(i, v) for i, v in enumerate(values) if v is not None]
    head = f'<svg class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{escape(title)}">'
    parts = [head, f'<text x="{PAD_L}" y="14" class="pt">{escape(title)}</text>']
    if not pts:
        parts.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" class="pl">no data yet</text></svg>')
        return "".join(parts)
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    if hi == lo:  # a flat line: a band around it (never below 0 for counts and shares)
        pad = abs(lo) * 0.1 or (0.01 if fmt == "%" else 1)
        lo, hi = (lo - pad if lo - pad >= 0 or lo < 0 else 0), hi + pad
    n = max(len(values) - 1, 1)

    def x(i: int) -> float:
        return PAD_L + (W - PAD_L - PAD_R) * (i / n if len(values) > 1 else 0.5)

    def y(v: float) -> float:
        return PAD_T + (H - PAD_T - PAD_B) * (1 - (v - lo) / (hi - lo))

    for v in (lo, hi):
        parts.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="pg"/>')
        parts.append(f'<text x="{PAD_L - 4}" y="{y(v) + 4:.1f}" text-anchor="end" class="pl">{_fmt(v, fmt)}</text>')
    parts.append(
        '<polyline class="pline" points="' + " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in pts) + '"/>'
    )
    step = max(1, len(values) // 6)
    for i, lab in enumerate(labels):
        if i % step == 0 or i == len(labels) - 1:
            parts.append(f'<text x="{x(i):.1f}" y="{H - 8}" text-anchor="middle" class="pl">{escape(lab)}</text>')
    for i, v in pts:
        flag = flags[i] if i < len(flags) else None
        tip = f"{labels[i]}: {_fmt(v, fmt)}" + (f" — DRIFT: {flag}" if flag else "")
        dot = (f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="{5 if flag else 3}" class="{"pflag" if flag else "pdot"}">'
               f"<title>{escape(tip)}</title></circle>")  # fmt: skip
        link = links[i] if i < len(links) else None
        parts.append(f'<a href="{escape(link)}">{dot}</a>' if link else dot)
    parts.append("</svg>")
    return "".join(parts)


def histogram(title: str, edges: Sequence[int], now: Sequence[int], before: Sequence[int] | None) -> str:
    """Token histogram of the last run (bars) against the run before (outlined bars), as shares of chunks."""
    names = [f"<{edges[0]}"] + [f"{a}-{b - 1}" for a, b in zip(edges, edges[1:], strict=False)] + [f"≥{edges[-1]}"]
    tot_now, tot_before = sum(now) or 1, sum(before or []) or 1
    shares_now = [v / tot_now for v in now]
    shares_before = [v / tot_before for v in before] if before else []
    top = max(shares_now + shares_before + [0.01])
    bw = (W - PAD_L - PAD_R) / max(len(names), 1)
    parts = [f'<svg class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{escape(title)}">',
             f'<text x="{PAD_L}" y="14" class="pt">{escape(title)}</text>']  # fmt: skip
    base = H - PAD_B
    for i, name in enumerate(names):
        x0 = PAD_L + i * bw
        if i < len(shares_now):
            h = (base - PAD_T) * shares_now[i] / top
            parts.append(f'<rect x="{x0 + 2:.1f}" y="{base - h:.1f}" width="{bw - 4:.1f}" height="{h:.1f}" class="bar">'
                         f"<title>{escape(name)} tokens: {shares_now[i]:.1%} ({now[i]} chunks)</title></rect>")  # fmt: skip
        if i < len(shares_before):
            h = (base - PAD_T) * shares_before[i] / top
            parts.append(f'<rect x="{x0 + 2:.1f}" y="{base - h:.1f}" width="{bw - 4:.1f}" height="{h:.1f}" class="barb">'
                         f"<title>run before: {shares_before[i]:.1%}</title></rect>")  # fmt: skip
        if i % 2 == 0:
            parts.append(f'<text x="{x0 + bw / 2:.1f}" y="{H - 8}" text-anchor="middle" class="pl">{escape(name)}</text>')
    parts.append(f'<text x="{PAD_L - 4}" y="{PAD_T + 4}" text-anchor="end" class="pl">{top:.0%}</text></svg>')
    return "".join(parts)
