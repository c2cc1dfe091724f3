"""onnx-reducer: shrink a failing ONNX model to a minimal model that fails the same way."""

__version__ = "0.1.0"

from reducer import interrupts as _interrupts  # noqa: E402 (light; before the CLI's heavy imports)

_interrupts.hold_while_importing()
