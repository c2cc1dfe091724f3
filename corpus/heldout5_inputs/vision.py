"""Deterministic, numpy-only builders of the fifth held-out set's vision inputs (lineless-table-rec,
rapid-table-det, table-cls). Each mirrors its package's own preprocessing (read from the wheel's source) on
synthetic table images drawn here (cells of dark glyph blocks on white paper, with or without ruling lines); cv2's
bilinear resize and warpAffine are written out in numpy. Nothing from the wheels is imported at run time.

    python corpus/make_heldout5_inputs.py   # writes them to corpus/inputs/
"""

import numpy as np


def _table_image(seed, height, width, n_rows, n_cols, ruled=True):
    """A BGR uint8 table: n_rows x n_cols cells of word-like glyph runs, ruling lines when ruled."""
    rng = np.random.default_rng(seed)
    img = np.full((height, width, 3), 250, dtype=np.uint8)
    rows = np.linspace(20, height - 20, n_rows + 1).astype(int)
    cols = np.linspace(20, width - 20, n_cols + 1).astype(int)
    if ruled:
        for r in rows:
            img[r - 1:r + 1, cols[0]:cols[-1]] = 30
        for c in cols:
            img[rows[0]:rows[-1], c - 1:c + 1] = 30
    for i in range(n_rows):
        ink = 10 if i == 0 else 40  # a darker header row
        for j in range(n_cols):
            x = cols[j] + 10
            y = (rows[i] + rows[i + 1]) // 2
            for _ in range(int(rng.integers(3, 9))):
                if x + 7 > cols[j + 1] - 6:
                    break
                h = int(rng.integers(9, 14))
                img[y - h // 2:y + h // 2, x:x + 6] = ink + int(rng.integers(0, 30))
                x += 9
    return img


def _bilinear(img, xs, ys, border=None):
    """Sample img (H, W, C) at source coordinates xs (W') and ys (H') bilinearly; outside the image: border value
    (cv2.BORDER_CONSTANT) or, when border is None, the nearest edge pixel (cv2.resize)."""
    h, w = img.shape[:2]
    f = img.astype(np.float32)
    x0 = np.floor(xs).astype(int)
    y0 = np.floor(ys).astype(int)
    wx = (xs - x0).astype(np.float32)[None, :, None]
    wy = (ys - y0).astype(np.float32)[:, None, None]

    def at(yy, xx):
        v = f[np.clip(yy, 0, h - 1)][:, np.clip(xx, 0, w - 1)]
        if border is not None:
            inside = ((yy >= 0) & (yy < h))[:, None] & ((xx >= 0) & (xx < w))[None, :]
            v = np.where(inside[:, :, None], v, np.float32(border))
        return v

    out = (at(y0, x0) * (1 - wy) * (1 - wx) + at(y0, x0 + 1) * (1 - wy) * wx
           + at(y0 + 1, x0) * wy * (1 - wx) + at(y0 + 1, x0 + 1) * wy * wx)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def _resize(img, new_w, new_h):
    """cv2.resize(img, (new_w, new_h)) with INTER_LINEAR (half-pixel centres, edge pixels repeated)."""
    h, w = img.shape[:2]
    xs = np.clip((np.arange(new_w) + 0.5) * w / new_w - 0.5, 0, w - 1)
    ys = np.clip((np.arange(new_h) + 0.5) * h / new_h - 0.5, 0, h - 1)
    return _bilinear(img, xs, ys)


# ---------------------------------------------------------------- lineless-table-rec (LORE detector)
# lineless-table-rec==0.0.9, lineless_table_rec/main.py, LinelessTableRecognition.preprocess: cv2.warpAffine with
# get_affine_transform_upper_left(c=(0, 0), s=max(h, w), (768, 768)), i.e. the image scaled by 768 / max(h, w)
# into the top-left corner of a black 768 x 768 canvas; then (img / 255 - mean) / std with mean (0.408, 0.447,
# 0.470), std (0.289, 0.274, 0.278) in the image's (BGR) channel order, HWC -> [1, 3, 768, 768] float32.
def build_lineless_table_rec_lore_detect_table():
    img = _table_image(seed=5, height=300, width=560, n_rows=6, n_cols=4, ruled=False)
    scale = 768.0 / max(img.shape[:2])
    coords = np.arange(768) / scale  # warpAffine's inverse map of an axis-aligned scale
    canvas = _bilinear(img, coords, coords, border=0)
    mean = np.array([0.408, 0.447, 0.470], dtype=np.float32)
    std = np.array([0.289, 0.274, 0.278], dtype=np.float32)
    x = ((canvas / 255.0 - mean) / std).astype(np.float32)
    return {"input": np.ascontiguousarray(x.transpose(2, 0, 1)[None])}


# ---------------------------------------------------------------- rapid-table-det (table orientation classifier)
# rapid-table-det==0.0.1, rapid_table_det/predictor.py, PPLCNet.img_preprocess: utils.ResizePad(img, 624) (scale
# the longer side to 624 with cv2.resize, centre it on a white 624 x 624 canvas), CHW, / 255.0, float32. The
# package classifies one cropped table at a time (0/90/180/270); here three tables, each in its four
# orientations, are one batch of twelve crops.
def _resize_pad(img, target=624):
    h, w = img.shape[:2]
    ratio = target / max(h, w)
    new_w, new_h = int(ratio * w), int(ratio * h)
    resized = _resize(img, new_w, new_h)
    out = np.full((target, target, 3), 255, dtype=np.uint8)
    top, left = (target - new_h) // 2, (target - new_w) // 2
    out[top:top + new_h, left:left + new_w] = resized
    return out


def build_rapid_table_det_cls_12_crops():
    tables = [
        _table_image(seed=3, height=300, width=560, n_rows=6, n_cols=4),
        _table_image(seed=11, height=420, width=380, n_rows=8, n_cols=3),
        _table_image(seed=19, height=260, width=640, n_rows=4, n_cols=5),
    ]
    crops = [_resize_pad(np.ascontiguousarray(np.rot90(t, -k))) for t in tables for k in range(4)]
    x = np.stack([c.transpose(2, 0, 1) / 255.0 for c in crops]).astype(np.float32)
    return {"input": x}


# ---------------------------------------------------------------- table-cls (wired / wireless table classifier)
# table-cls==1.0.0, table_cls/main.py, TableCls._preprocess: the image as LoadImage gives it (BGR), PIL resize to
# 224 x 224 (PIL's resampling is approximated here by the bilinear resize above), / 255, minus mean (0.485, 0.456,
# 0.406), over std (0.229, 0.224, 0.225), HWC -> CHW, float32; output 0 = "wired", 1 = "wireless". The package
# classifies one table at a time; here six tables, each drawn ruled and without lines, are one batch of twelve.
def build_table_cls_wired_wireless_12():
    specs = [(3, 300, 560, 6, 4), (11, 420, 380, 8, 3), (19, 260, 640, 4, 5), (23, 500, 700, 10, 6),
             (29, 220, 480, 3, 3), (31, 360, 900, 7, 8)]
    mean = np.array([0.485, 0.456, 0.406], dtype=np.float32)
    std = np.array([0.229, 0.224, 0.225], dtype=np.float32)
    batch = []
    for seed, height, width, n_rows, n_cols in specs:
        for ruled in (True, False):
            img = _resize(_table_image(seed, height, width, n_rows, n_cols, ruled=ruled), 224, 224)
            batch.append(((img.astype(np.float32) / 255.0 - mean) / std).transpose(2, 0, 1))
    return {"input": np.stack(batch).astype(np.float32)}


BUILDERS = {
    "lineless_table_rec_lore_detect_table": build_lineless_table_rec_lore_detect_table,
    "rapid_table_det_cls_12_crops": build_rapid_table_det_cls_12_crops,
    "table_cls_wired_wireless_12": build_table_cls_wired_wireless_12,
}
