"""KServe v2 tensors <-> numpy, checked against ``[server.limits]`` before anything is allocated.

Why here and not in the servers: the gRPC and HTTP servers receive the same tensors in three
encodings (gRPC ``raw_input_contents``, gRPC typed ``contents``, HTTP JSON ``data`` or the
binary-tensor extension) and both must refuse the same bad input with the same message.
The gRPC messages are read by attribute only, so nothing here imports grpc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from edged.errors import InvalidArgument, ResourceExhausted

if TYPE_CHECKING:
    from edged.config.server import Limits

#: KServe v2 datatype <-> numpy (BYTES and BF16 are not model tensor types in edged)
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "UINT8": np.dtype(np.uint8), "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32), "UINT64": np.dtype(np.uint64), "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16), "INT32": np.dtype(np.int32), "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16), "FP32": np.dtype(np.float32), "FP64": np.dtype(np.float64),
}
_NAMES = {v: k for k, v in DATATYPES.items()}

#: the gRPC ``InferTensorContents`` field each datatype travels in when typed
TYPED_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents",
}


def datatype(dtype: np.dtype) -> str:
    """numpy dtype -> KServe datatype name (either byte order: outputs travel little-endian)."""
    name = _NAMES.get(np.dtype(dtype).newbyteorder("="))
    if name is None:
        raise InvalidArgument(f"dtype {np.dtype(dtype).name} has no KServe v2 datatype")
    return name


def triton_type(dtype: np.dtype) -> str:
    """numpy dtype -> Triton model-config ``data_type`` (``TYPE_FP32``)."""
    return "TYPE_" + datatype(dtype)


@dataclass
class Tensor:
    """One decoded input tensor."""

    name: str
    array: np.ndarray


def check_header(where: str, name: Any, dt: Any, shape: Any, limits: Limits
                 ) -> tuple[np.dtype, tuple[int, ...], int]:
    """Datatype and shape of one input -> (dtype, shape, byte length), within the limits."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{where}: needs a name")
    dtype = DATATYPES.get(dt) if isinstance(dt, str) else None
    if dtype is None:
        if dt in ("BYTES", "BF16"):
            raise InvalidArgument(f"{where} ({name!r}): datatype {dt} is not supported; "
                                  f"edged models take {', '.join(DATATYPES)}")
        raise InvalidArgument(f"{where} ({name!r}): unknown datatype {dt!r}; expected one of "
                              f"{', '.join(DATATYPES)}")
    if not isinstance(shape, list | tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise InvalidArgument(f"{where} ({name!r}): shape must be a list of integers")
    shape = tuple(int(d) for d in shape)
    if len(shape) > limits.max_rank:
        raise InvalidArgument(f"{where} ({name!r}): rank {len(shape)} exceeds "
                              f"{limits.max_rank}")
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"{where} ({name!r}): negative dimension in {list(shape)}")
    if any(d > limits.max_dim for d in shape):
        raise InvalidArgument(f"{where} ({name!r}): a dimension of {list(shape)} exceeds "
                              f"{limits.max_dim}")
    n = math.prod(shape)
    if n > limits.max_elements:
        raise ResourceExhausted(f"{where} ({name!r}): {n} elements exceed the limit of "
                                f"{limits.max_elements}")
    return dtype, shape, n * dtype.itemsize


def from_bytes(where: str, name: str, dtype: np.dtype, shape: tuple[int, ...], nbytes: int,
               data: bytes | memoryview) -> np.ndarray:
    """A raw little-endian row-major buffer -> array (a view of ``data``; read-only)."""
    if len(data) != nbytes:
        raise InvalidArgument(f"{where} ({name!r}): {len(data)} bytes of data; "
                              f"{dtype.name} {list(shape)} needs {nbytes}")
    return np.frombuffer(data, dtype.newbyteorder("<"), count=math.prod(shape)).reshape(shape)


def from_values(where: str, name: str, dtype: np.dtype, shape: tuple[int, ...],
                values: Any) -> np.ndarray:
    """Typed values (gRPC ``contents``, JSON ``data``: flat or nested) -> array."""
    want = math.prod(shape)
    try:
        arr = np.asarray(values, dtype=dtype if dtype != np.bool_ else None)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidArgument(f"{where} ({name!r}): data is not {datatype(dtype)}: {e}") from None
    if arr.dtype == object:
        raise InvalidArgument(f"{where} ({name!r}): data is ragged or not numbers")
    if dtype == np.bool_:
        if arr.size and arr.dtype != np.bool_:
            raise InvalidArgument(f"{where} ({name!r}): BOOL data must be true/false")
        arr = arr.astype(np.bool_)
    if arr.size != want:
        raise InvalidArgument(f"{where} ({name!r}): {arr.size} values; shape {list(shape)} "
                              f"needs {want}")
    return arr.reshape(shape)


def grpc_inputs(request: Any, limits: Limits) -> list[Tensor]:
    """A ``ModelInferRequest``'s inputs: ``raw_input_contents`` (tritonclient) or typed."""
    inputs = request.inputs
    raw = request.raw_input_contents
    if len(inputs) > limits.max_inputs:
        raise InvalidArgument(f"{len(inputs)} inputs exceed the limit of {limits.max_inputs}")
    if raw and len(raw) != len(inputs):
        raise InvalidArgument(f"{len(raw)} raw_input_contents for {len(inputs)} inputs; "
                              "give one per input, in input order")
    out = []
    for i, inp in enumerate(inputs):
        where = f"inputs[{i}]"
        dtype, shape, nbytes = check_header(where, inp.name, inp.datatype, list(inp.shape),
                                            limits)
        if raw:
            arr = from_bytes(where, inp.name, dtype, shape, nbytes, raw[i])
        else:
            field = TYPED_FIELD.get(inp.datatype)
            if field is None:
                raise InvalidArgument(f"{where} ({inp.name!r}): {inp.datatype} travels in "
                                      "raw_input_contents only")
            arr = from_values(where, inp.name, dtype, shape, getattr(inp.contents, field))
        out.append(Tensor(inp.name, arr))
    return out


def http_inputs(body: dict[str, Any], binary: memoryview, limits: Limits) -> list[Tensor]:
    """The ``inputs`` of a REST infer request; ``binary`` is what follows the JSON header
    (the binary-tensor extension: each input's ``parameters.binary_data_size`` bytes)."""
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidArgument("'inputs' must be a non-empty list")
    if len(inputs) > limits.max_inputs:
        raise InvalidArgument(f"{len(inputs)} inputs exceed the limit of {limits.max_inputs}")
    out = []
    offset = 0
    for i, inp in enumerate(inputs):
        where = f"inputs[{i}]"
        if not isinstance(inp, dict):
            raise InvalidArgument(f"{where}: must be an object")
        name = inp.get("name")
        dtype, shape, nbytes = check_header(where, name, inp.get("datatype"), inp.get("shape"),
                                            limits)
        params = inp.get("parameters") or {}
        size = params.get("binary_data_size") if isinstance(params, dict) else None
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidArgument(f"{where} ({name!r}): binary_data_size must be an "
                                      "integer >= 0")
            if offset + size > len(binary):
                raise InvalidArgument(f"{where} ({name!r}): binary_data_size {size} runs past "
                                      f"the {len(binary)} bytes after the JSON header")
            arr = from_bytes(where, name, dtype, shape, nbytes, binary[offset:offset + size])
            offset += size
        elif "data" in inp:
            arr = from_values(where, name, dtype, shape, inp["data"])
        else:
            raise InvalidArgument(f"{where} ({name!r}): needs 'data' or "
                                  "parameters.binary_data_size")
        out.append(Tensor(name, arr))
    if offset != len(binary):
        raise InvalidArgument(f"{len(binary) - offset} bytes after the JSON header belong to no "
                              "input (check Inference-Header-Content-Length and "
                              "binary_data_size)")
    return out


def as_wire(arr: np.ndarray) -> bytes:
    """Little-endian row-major bytes of an output (what ``raw_output_contents`` carries)."""
    a = np.ascontiguousarray(arr)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()
