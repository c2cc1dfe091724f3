"""Shared by every test. The larger corpus models are fetched by the tests that use them, on demand:
tests/corpus_files.py."""
