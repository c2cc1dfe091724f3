"""Numpy-only drawing and resizing for the sixth held-out set's synthetic images (no cv2, no PIL): float32 HxWx3
images in [0, 255], RGB unless noted."""
import numpy as np


def blank(h, w, color=(255, 255, 255)):
    img = np.empty((h, w, 3), np.float32)
    img[:] = np.asarray(color, np.float32)
    return img


def gradient_bg(h, w, c0, c1, horizontal=False):
    t = np.linspace(0.0, 1.0, w if horizontal else h, dtype=np.float32)
    c0 = np.asarray(c0, np.float32)
    c1 = np.asarray(c1, np.float32)
    line = c0[None, :] * (1 - t[:, None]) + c1[None, :] * t[:, None]
    if horizontal:
        return np.broadcast_to(line[None, :, :], (h, w, 3)).copy()
    return np.broadcast_to(line[:, None, :], (h, w, 3)).copy()


def draw_segment(img, p0, p1, width, color, alpha=1.0):
    """Anti-aliased thick line segment (distance field)."""
    h, w = img.shape[:2]
    (y0, x0), (y1, x1) = p0, p1
    r = width / 2.0 + 1.0
    ya, yb = int(max(0, np.floor(min(y0, y1) - r))), int(min(h, np.ceil(max(y0, y1) + r) + 1))
    xa, xb = int(max(0, np.floor(min(x0, x1) - r))), int(min(w, np.ceil(max(x0, x1) + r) + 1))
    if ya >= yb or xa >= xb:
        return
    yy, xx = np.mgrid[ya:yb, xa:xb].astype(np.float32)
    dy, dx = y1 - y0, x1 - x0
    L2 = dy * dy + dx * dx
    t = np.zeros_like(yy) if L2 == 0 else np.clip(((yy - y0) * dy + (xx - x0) * dx) / L2, 0, 1)
    d = np.hypot(yy - (y0 + t * dy), xx - (x0 + t * dx))
    a = np.clip(width / 2.0 + 0.5 - d, 0, 1)[..., None] * alpha
    col = np.asarray(color, np.float32)
    img[ya:yb, xa:xb] = img[ya:yb, xa:xb] * (1 - a) + col * a


def draw_arc(img, cy, cx, ry, rx, t0, t1, width, color, n=12):
    ts = np.linspace(t0, t1, n)
    pts = [(cy + ry * np.sin(t), cx + rx * np.cos(t)) for t in ts]
    for a, b in zip(pts[:-1], pts[1:], strict=True):
        draw_segment(img, a, b, width, color)


def fill_rect(img, y0, x0, y1, x1, color, alpha=1.0):
    y0, x0, y1, x1 = int(y0), int(x0), int(y1), int(x1)
    col = np.asarray(color, np.float32)
    img[y0:y1, x0:x1] = img[y0:y1, x0:x1] * (1 - alpha) + col * alpha


def fill_ellipse(img, cy, cx, ry, rx, color, alpha=1.0):
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    d = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2
    a = np.clip((1.0 - d) * min(ry, rx) / 2.0, 0, 1)[..., None] * alpha
    img[:] = img * (1 - a) + np.asarray(color, np.float32) * a


def glyph(img, rng, y, x, gh, gw, width, color):
    """One character-like glyph of 1-4 strokes inside the cell (y, x, gh, gw)."""
    n = rng.integers(1, 5)
    for _ in range(n):
        kind = rng.integers(0, 5)
        if kind == 0:    # vertical
            xx = x + rng.uniform(0.15, 0.85) * gw
            draw_segment(img, (y + rng.uniform(0, .2) * gh, xx), (y + rng.uniform(.8, 1) * gh, xx), width, color)
        elif kind == 1:  # horizontal
            yy = y + rng.uniform(0.1, 0.9) * gh
            draw_segment(img, (yy, x + rng.uniform(0, .2) * gw), (yy, x + rng.uniform(.8, 1) * gw), width, color)
        elif kind == 2:  # diagonal
            draw_segment(img, (y + rng.uniform(0, .3) * gh, x + rng.uniform(0, .3) * gw),
                         (y + rng.uniform(.7, 1) * gh, x + rng.uniform(.7, 1) * gw), width, color)
        elif kind == 3:  # anti-diagonal
            draw_segment(img, (y + rng.uniform(.7, 1) * gh, x + rng.uniform(0, .3) * gw),
                         (y + rng.uniform(0, .3) * gh, x + rng.uniform(.7, 1) * gw), width, color)
        else:            # bowl
            draw_arc(img, y + gh * rng.uniform(.4, .7), x + gw / 2, gh * rng.uniform(.25, .45), gw * .4,
                     rng.uniform(0, 2), rng.uniform(4, 6.3), width, color)


def text_line(img, rng, y, x0, x1, gh, color=(20, 20, 20), width=None, space_p=0.15):
    """A line of glyphs with word gaps, height gh, from x0 to at most x1."""
    gw = gh * 0.6
    width = width or max(1.0, gh * 0.12)
    x = x0
    while x + gw < x1:
        if rng.random() < space_p:
            x += gw * 0.8
            continue
        glyph(img, rng, y, x, gh, gw * rng.uniform(.7, 1.0), width, color)
        x += gw * rng.uniform(1.0, 1.25)
    return x


def text_block(img, rng, y0, x0, x1, n_lines, gh, leading=1.7, color=(20, 20, 20), ragged=True):
    y = y0
    for i in range(n_lines):
        end = x1 if (not ragged or i < n_lines - 1) else x0 + (x1 - x0) * rng.uniform(.3, .8)
        text_line(img, rng, y, x0, end, gh, color)
        y += gh * leading
    return y


def barcode(img, rng, y0, x0, h, module=2, n_bars=95, color=(0, 0, 0)):
    """EAN-13-like bars: random widths of 1-4 modules."""
    x = x0
    for i in range(n_bars // 2):
        bw = module * rng.integers(1, 5)
        if i % 2 == 0:
            fill_rect(img, y0, x, y0 + h, x + bw, color)
        x += bw
    return x


def add_noise(img, rng, sigma):
    img += rng.normal(0, sigma, img.shape).astype(np.float32)
    np.clip(img, 0, 255, out=img)
    return img


def resize_bilinear(img, oh, ow):
    """Bilinear resize (half-pixel centres, like cv2.INTER_LINEAR / PIL upscaling)."""
    h, w = img.shape[:2]
    ys = np.clip((np.arange(oh, dtype=np.float32) + 0.5) * h / oh - 0.5, 0, h - 1)
    xs = np.clip((np.arange(ow, dtype=np.float32) + 0.5) * w / ow - 0.5, 0, w - 1)
    y0 = np.floor(ys).astype(int)
    x0 = np.floor(xs).astype(int)
    y1 = np.minimum(y0 + 1, h - 1)
    x1 = np.minimum(x0 + 1, w - 1)
    wy = (ys - y0)[:, None, None]
    wx = (xs - x0)[None, :, None]
    a = img[y0][:, x0]
    b = img[y0][:, x1]
    c = img[y1][:, x0]
    d = img[y1][:, x1]
    return (a * (1 - wx) + b * wx) * (1 - wy) + (c * (1 - wx) + d * wx) * wy


def resize_area(img, oh, ow):
    """Downscale by box-averaging on an integer grid then bilinear to exact size
    (approximates PIL's antialiased BILINEAR downscale)."""
    h, w = img.shape[:2]
    fy, fx = max(1, h // oh), max(1, w // ow)
    if fy > 1 or fx > 1:
        hh, ww = (h // fy) * fy, (w // fx) * fx
        img = img[:hh, :ww].reshape(hh // fy, fy, ww // fx, fx, -1).mean(axis=(1, 3))
    return resize_bilinear(img, oh, ow)


def letterbox(img, th, tw, pad_color, center=True):
    h, w = img.shape[:2]
    s = min(th / h, tw / w)
    nh, nw = max(1, round(h * s)), max(1, round(w * s))
    r = resize_area(img, nh, nw)
    out = blank(th, tw, pad_color)
    py, px = ((th - nh) // 2, (tw - nw) // 2) if center else (0, 0)
    out[py:py + nh, px:px + nw] = r
    return out


def quantize(img):
    """Round to uint8 values (as a decoded image would be), kept as float32."""
    return np.clip(np.rint(img), 0, 255).astype(np.float32)


def document_page(rng, h, w, gh=None, title=True, color=(25, 25, 25), bg=(250, 248, 244)):
    """A printed page: title, paragraphs of text, a thin rule."""
    img = blank(h, w, bg)
    gh = gh or max(6, h // 60)
    m = w * 0.08
    y = h * 0.06
    if title:
        text_line(img, rng, y, w * 0.25, w * 0.75, gh * 1.8, color, width=gh * 0.25)
        y += gh * 4
    while y < h * 0.9:
        n = int(rng.integers(3, 8))
        y = text_block(img, rng, y, m, w - m, n, gh, 1.7, color)
        y += gh * 1.5
        if rng.random() < 0.2 and y < h * 0.85:
            draw_segment(img, (y, m), (y, w - m), max(1, gh * 0.1), color)
            y += gh
    return img
