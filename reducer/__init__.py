"""onnx-reducer: shrink a failing ONNX model to a minimal model that fails the same way."""

__version__ = "0.1.0"
