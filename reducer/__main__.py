"""`python -m reducer` is `onnx-reduce`."""

from reducer.cli import main

main()
