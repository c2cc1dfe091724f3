"""Standalone repro scripts shipped in bug-report bundles. Each is a complete program that needs only
numpy and its runtime; the bundle writer fills in the block of settings at its top."""
