"""Reading order of a PDF page: zones top-down, and a zone that a gutter splits read column by column.

A gutter is a vertical strip in the middle of a region that no text crosses (a title or a figure may),
with filled text columns on both sides: table cells, which do not fill their column, never make one.
"""

from __future__ import annotations

from pipeline.parse.pdf_layout import Block, Seg, group_lines, median_size, region_blocks


def page_blocks(segs: list[Seg]) -> list[Block]:
    """One page's paragraphs and tables in reading order."""
    out: list[Block] = []
    for region in reading_order(segs):
        out += region_blocks(group_lines(region))
    return out


def reading_order(segs: list[Seg], *, depth: int = 0) -> list[list[Seg]]:
    """Regions in reading order: full-width zones top-down and, between them, columns left to right."""
    if len(segs) < 8 or depth > 2:
        return [segs]
    gutter = _gutter(segs)
    if gutter is None:
        return [segs]
    g0, g1 = gutter
    out: list[list[Seg]] = []
    zone: list[Seg] = []
    spanning = False
    for s in sorted(segs, key=lambda s: -s.y1):
        crossing = s.x0 < g1 and s.x1 > g0
        if zone and crossing != spanning:
            out += _read_zone(zone, spanning, g0, depth)
            zone = []
        spanning = crossing
        zone.append(s)
    if zone:
        out += _read_zone(zone, spanning, g0, depth)
    return out


def _read_zone(zone: list[Seg], spanning: bool, g0: float, depth: int) -> list[list[Seg]]:
    if spanning:
        return [zone]
    left = [s for s in zone if s.x1 <= g0]
    right = [s for s in zone if s.x1 > g0]
    return [r for side in (left, right) if side for r in reading_order(side, depth=depth + 1)]


def _gutter(segs: list[Seg]) -> tuple[float, float] | None:
    """A vertical strip in the middle of the region that text columns on both sides leave empty."""
    lo, hi = min(s.x0 for s in segs), max(s.x1 for s in segs)
    width = int(hi - lo) + 2
    if width < 100:
        return None
    diff = [0] * (width + 1)
    for s in segs:
        diff[max(0, int(s.x0 - lo))] += 1
        diff[min(width, int(s.x1 - lo) + 1)] -= 1
    cover, run = [], 0
    for d in diff[:width]:
        run += d
        cover.append(run)
    allowed = max(1, len(segs) // 12)  # a title or a figure may cross the gutter
    size = median_size(segs)
    best: tuple[int, int, int] | None = None  # (crossings, -width, start)
    x = int(width * 0.2)
    while x < width * 0.8:
        if cover[x] > allowed:
            x += 1
            continue
        start, level = x, cover[x]
        while x < width * 0.8 and cover[x] <= allowed:
            level = max(level, cover[x])
            x += 1
        if x - start >= max(4.0, 0.6 * size):
            cand = (level, -(x - start), start)
            best = cand if best is None or cand < best else best
    if best is None:
        return None
    g0, g1 = lo + best[2], lo + best[2] - best[1]
    left = [s for s in segs if s.x1 <= g0]
    right = [s for s in segs if s.x0 >= g1]
    if not (_is_column(left) and _is_column(right)):
        return None
    overlap = min(max(s.y1 for s in left), max(s.y1 for s in right)) - max(
        min(s.y0 for s in left), min(s.y0 for s in right)
    )
    return (g0, g1) if overlap > 0 else None


def _is_column(side: list[Seg]) -> bool:
    """Text columns are filled: most of their lines run across most of the column (table cells do not)."""
    lines = group_lines(side)
    if len(lines) < 4:
        return False
    lo, hi = min(ln.x0 for ln in lines), max(ln.x1 for ln in lines)
    full = sum(len(ln.cells) == 1 and ln.x1 - ln.x0 >= 0.7 * (hi - lo) for ln in lines)
    return full >= 0.5 * len(lines)
