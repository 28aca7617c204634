"""One ``edged bench`` client process speaking KServe v2 through tritonclient (its asyncio
clients, ``in_flight`` requests outstanding), reporting what the native bench client does.
The same client drives edged and, with ``edged bench --peer``, Triton, MLServer or KServe."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from edged.protocols.kserve.tensors import datatype


def run_client(protocol: str, address: str, header: dict[str, Any], frames: list[bytes],
               in_flight: int, duration: float, done: Any, out: Any) -> None:
    """Target of a bench client process: ``out.put({latencies, statuses, elapsed})``."""
    out.put(asyncio.run(_drive(protocol, address, header, frames, in_flight, duration, done)))


async def _drive(protocol: str, address: str, header: dict[str, Any], frames: list[bytes],
                 in_flight: int, duration: float, done: Any) -> dict[str, Any]:
    if protocol == "kserve-grpc":
        import tritonclient.grpc as mod
        import tritonclient.grpc.aio as aio
    else:
        import tritonclient.http as mod  # type: ignore[no-redef]
        import tritonclient.http.aio as aio  # type: ignore[no-redef]
    from tritonclient.utils import InferenceServerException

    arrays = [np.frombuffer(f, m["dtype"]).reshape(m["shape"])
              for m, f in zip(header["inputs"], frames, strict=True)]
    names = [m.get("name") for m in header["inputs"]]
    client = aio.InferenceServerClient(address)
    meta = await client.get_model_metadata(header["model"])
    spec = meta.inputs if protocol == "kserve-grpc" else meta["inputs"]
    known = [s.name if protocol == "kserve-grpc" else s["name"] for s in spec]
    inputs = []
    for name, a in zip(names, arrays, strict=True):
        i = mod.InferInput(name or known[0], list(a.shape), datatype(a.dtype))
        i.set_data_from_numpy(a)
        inputs.append(i)
    lat: list[float] = []
    statuses: dict[str, int] = {}
    variants: dict[str, int] = {}
    t0 = time.monotonic()
    end = t0 + duration

    async def worker() -> None:
        while time.monotonic() < end:
            start = time.perf_counter()
            try:
                r = await client.infer(header["model"], inputs)
                status = "OK"
                lat.append(time.perf_counter() - start)
                v = _variant(r, protocol)
                if v is not None:  # another server (edged bench --peer) states none
                    variants[v] = variants.get(v, 0) + 1
            except InferenceServerException as e:
                status = str(e.status())
            statuses[status] = statuses.get(status, 0) + 1
            with done.get_lock():
                done.value += 1

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    await client.close()
    return {"latencies": lat, "statuses": statuses, "variants": variants,
            "elapsed": time.monotonic() - t0}


def _variant(r: Any, protocol: str) -> str | None:
    """The ``variant`` reply parameter edged sets (None from a server that does not)."""
    params = r.get_response().parameters if protocol == "kserve-grpc" else (
        r.get_response().get("parameters") or {})
    if "variant" not in params:
        return None
    v = params["variant"]
    return str(v.string_param if protocol == "kserve-grpc" else v)
