#!/usr/bin/env python3
"""Regenerate the corpus input files (corpus/inputs/*.npz) deterministically.

numpy only. The saved .npz files are the source of truth for the cases; this
script documents exactly how they were produced and can rebuild them:

    python corpus/make_inputs.py            # rewrite inputs/*.npz
    python corpus/make_inputs.py --check    # compare with the saved files

Generators
----------
* speech-like audio: a synthetic voiced vowel (f0 = 120 Hz, 29 harmonics
  shaped by formants at 700/1200/2600 Hz), 512 samples at 16 kHz.  Silero
  VAD's own wrapper (silero_vad/utils_vad.py, OnnxWrapper.__call__) prepends
  a 64-sample context window, all zeros on the first call, so the model input
  is [1, 576].
* text images: dark 5x7 bitmap-font glyphs on a light background (uint8 RGB,
  grey levels 20 and 235), scaled up with nearest neighbour, then
  preprocessed exactly like rapidocr-onnxruntime 1.4.4 does
  ((img/255 - 0.5)/0.5, CHW, right-padded with zeros) unless a case says the
  normalisation was skipped ("raw pixels").
"""
import argparse
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "inputs")

# ----------------------------------------------------------------- audio
def vowel(peak, n=512, sr=16000):
    t = np.arange(n) / sr
    x = np.zeros_like(t)
    for k in range(1, 30):
        f = k * 120.0
        a = (np.exp(-((f - 700) / 150) ** 2) + 0.5 * np.exp(-((f - 1200) / 200) ** 2)
             + 0.2 * np.exp(-((f - 2600) / 300) ** 2) + 0.05)
        x += a * np.sin(2 * np.pi * f * t + 0.3 * k)
    return peak * x / np.abs(x).max()


def silero_feeds(samples):
    x = np.concatenate([np.zeros(64), samples])[None].astype(np.float32)
    return {"input": x, "state": np.zeros((2, 1, 128), np.float32),
            "sr": np.array(16000, np.int64)}


# ----------------------------------------------------------------- images
FONT = {
    'A': ["01110", "10001", "10001", "11111", "10001", "10001", "10001"],
    'D': ["11110", "10001", "10001", "10001", "10001", "10001", "11110"],
    'E': ["11111", "10000", "10000", "11110", "10000", "10000", "11111"],
    'H': ["10001", "10001", "10001", "11111", "10001", "10001", "10001"],
    'L': ["10000", "10000", "10000", "10000", "10000", "10000", "11111"],
    'N': ["10001", "11001", "10101", "10011", "10001", "10001", "10001"],
    'O': ["01110", "10001", "10001", "10001", "10001", "10001", "01110"],
    'T': ["11111", "00100", "00100", "00100", "00100", "00100", "00100"],
    'X': ["10001", "10001", "01010", "00100", "01010", "10001", "10001"],
    '0': ["01110", "10011", "10101", "10101", "10101", "11001", "01110"],
    '1': ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    '2': ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    ' ': ["00000"] * 7,
}


def render(text, scale=4, pad=4, fg=20, bg=235):
    cols = []
    for ch in text:
        cols.append(np.array([[int(c) for c in r] for r in FONT[ch]], np.uint8))
        cols.append(np.zeros((7, 1), np.uint8))
    bm = np.kron(np.concatenate(cols, 1), np.ones((scale, scale), np.uint8))
    bm = np.pad(bm, pad)
    return np.where(bm[..., None] > 0, fg, bg).astype(np.uint8).repeat(3, 2)


def resize_nn(img, h, w):
    H, W = img.shape[:2]
    return img[(np.arange(h) * H / h).astype(int)][:, (np.arange(w) * W / w).astype(int)]


def line_input(img, H, W, normalise=True):
    """rapidocr cls/rec preprocessing: keep aspect, height H, pad width to W."""
    h, w = img.shape[:2]
    rw = min(W, int(math.ceil(H * w / h)))
    r = resize_nn(img, H, rw).astype(np.float32).transpose(2, 0, 1)
    if normalise:
        r = (r / 255.0 - 0.5) / 0.5
    out = np.zeros((3, H, W), np.float32)
    out[:, :, :rw] = r
    return out[None]


def page_image():
    a = render("HELLO ONNX", scale=3)
    b = render("2021 DATA TEXT", scale=2)
    page = np.full((160, 640, 3), 235, np.uint8)
    page[20:20 + a.shape[0], 30:30 + a.shape[1]] = a
    page[90:90 + b.shape[0], 60:60 + b.shape[1]] = b
    return page


def det_input(img):
    """rapidocr det preprocessing (mean = std = 0.5), HxW already /32."""
    return ((img.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None]


# ----------------------------------------------------------------- cases
def build():
    return {
        # int16-scale PCM (peak 16000 of 32767, about -6 dBFS) fed without /32768
        "silero_vad_int16pcm.npz": silero_feeds(np.round(vowel(16000.0))),
        # the same chunk correctly normalised to [-1, 1]
        "silero_vad_normalised.npz": silero_feeds(np.round(vowel(16000.0)) / 32768.0),
        # an upright text line for the 0/180 degree classifier, 1x3x48x192
        "ppocr_cls_textline.npz": {"x": line_input(render("HELLO ONNX 2021"), 48, 192)},
        # a 160x640 page with two text lines, 1x3x160x640
        "ppocrv4_det_page.npz": {"x": det_input(page_image())},
        # a text line for the recogniser, normalisation forgotten: 0..255, 1x3x48x320
        "ppocrv4_rec_textline_rawpixels.npz": {"x": line_input(render("HELLO ONNX 2021"), 48, 320, normalise=False)},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    bad = 0
    for fname, feeds in build().items():
        path = os.path.join(INPUTS, fname)
        if args.check:
            with np.load(path) as z:
                same = set(z.files) == set(feeds) and all(
                    z[k].dtype == v.dtype and np.array_equal(z[k], v) for k, v in feeds.items())
            print(("same   " if same else "DIFFERS"), fname)
            bad += not same
        else:
            os.makedirs(INPUTS, exist_ok=True)
            np.savez_compressed(path, **feeds)
            print("wrote", fname, {k: (v.shape, str(v.dtype)) for k, v in feeds.items()})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
