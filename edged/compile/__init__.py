"""The artifact pipeline: turn one trained ONNX model into a ladder of variants."""
