"""Deterministic, numpy-only builders of the fourth held-out set's vision inputs (vk-captcha-cyrillic, vtop-auth-lite).
Each mirrors its package's own preprocessing (read from the wheel's source) on a synthetic captcha drawn here;
nothing from the wheels is imported at run time.

    python corpus/make_heldout4_inputs.py   # writes them to corpus/inputs/
"""

import numpy as np


def _disk(img, cy, cx, r, color):
    h, w = img.shape[:2]
    yy, xx = np.ogrid[:h, :w]
    m = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    img[m] = color


def _ellipse(img, cy, cx, ry, rx, color):
    h, w = img.shape[:2]
    yy, xx = np.ogrid[:h, :w]
    m = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
    img[m] = color


def _stroke(img, pts, color, width):
    """Polyline of thick round strokes through pts [(y, x), ...]."""
    for (y0, x0), (y1, x1) in zip(pts[:-1], pts[1:], strict=True):
        n = int(max(abs(y1 - y0), abs(x1 - x0)) * 2) + 1
        for t in np.linspace(0.0, 1.0, n):
            _disk(img, y0 + (y1 - y0) * t, x0 + (x1 - x0) * t, width / 2.0, color)


def _captcha_image(rng, h, w, n_chars):
    """RGB uint8 captcha-like picture: light noisy background, dark glyph strokes,
    a crossing curve, speckle noise."""
    base = rng.integers(200, 246, size=3)
    img = np.empty((h, w, 3), np.float64)
    img[:] = base
    yy, xx = np.mgrid[:h, :w]
    img += 12 * np.sin(xx[..., None] / (7 + rng.random() * 5) + rng.random() * 6)
    img += rng.normal(0, 6, img.shape)
    img = np.clip(img, 0, 255)
    cw = w / (n_chars + 1)
    for i in range(n_chars):
        color = rng.integers(10, 120, size=3)
        cx = cw * (i + 0.8) + rng.uniform(-3, 3)
        cy = h / 2 + rng.uniform(-h * 0.1, h * 0.1)
        gh, gw = h * rng.uniform(0.28, 0.38), cw * rng.uniform(0.3, 0.45)
        k = rng.integers(3, 6)
        pts = [(cy + rng.uniform(-gh, gh), cx + rng.uniform(-gw, gw)) for _ in range(k)]
        _stroke(img, pts, color, width=max(2.0, h / 14))
    # crossing noise curve
    xs = np.linspace(0, w - 1, 12)
    ys = h / 2 + (h * 0.25) * np.sin(xs / w * 2 * np.pi * rng.uniform(0.7, 1.5) + rng.random() * 3)
    _stroke(img, list(zip(ys, xs, strict=True)), rng.integers(40, 140, size=3), width=1.5)
    sp = rng.random((h, w)) < 0.02
    img[sp] = rng.integers(0, 255, size=(int(sp.sum()), 3))
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def build_vkcaptcha_cyr_bgr():
    """vk_captcha/solver.py _solve_task: cv2.imdecode (BGR, 50x130x3 VK jpeg) -> float32 /255
    -> transpose to (W=130, H=50, C=3) -> batch of 1. Input 'image' float32 [1,130,50,3]."""
    rng = np.random.default_rng(1234)
    rgb = _captcha_image(rng, 50, 130, 6)
    bgr = rgb[..., ::-1]
    x = bgr.astype(np.float32) / 255.0
    x = x.transpose(1, 0, 2)[None]
    return {"image": np.ascontiguousarray(x, dtype=np.float32)}


def build_vtop_captcha_gray():
    """vtop_auth_lite/ocr.py CaptchaSolver.solve: PIL convert('L') -> resize((150,50))
    -> float32 /255 -> (x-0.5)/0.5 -> [1,1,50,150]. Image: light noisy background with six
    dark glyph-like strokes, generated at 150x50 so the resize is the identity.
    (The model greedy-decodes this to 'CPTFTP', i.e. it sees characters.)"""
    rng = np.random.default_rng(0)
    img = np.full((50, 150), 235.0) + rng.normal(0, 8, (50, 150))
    for i in range(6):
        cx = 12 + i * 23 + rng.uniform(-2, 2)
        cy = 25 + rng.uniform(-3, 3)
        pts = [(cy + rng.uniform(-13, 13), cx + rng.uniform(-7, 7)) for _ in range(rng.integers(3, 6))]
        im3 = np.repeat(img[..., None], 3, -1)
        _stroke(im3, pts, np.array([30.0] * 3), 3)
        img = im3[..., 0]
    L = np.clip(np.round(img), 0, 255).astype(np.uint8)
    x = L.astype(np.float32) / 255.0
    x = (x[np.newaxis, np.newaxis, :, :] - 0.5) / 0.5
    return {"input": x.astype(np.float32)}


BUILDERS = {
    "vkcaptcha_cyr_bgr": build_vkcaptcha_cyr_bgr,
    "vtop_captcha_gray": build_vtop_captcha_gray,
}
