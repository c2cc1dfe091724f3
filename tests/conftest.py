"""Shared by every test. The larger corpus models are fetched by the tests that use them, on demand:
tests/corpus_files.py."""

import signal

# A test suite started as a background job of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and so does every process it starts: the tool then keeps it ignored, as it should for a user's
# `nohup onnx-reduce`, and the tests that interrupt a reduction with SIGINT would wait on it forever.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
