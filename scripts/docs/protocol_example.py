#!/usr/bin/env python3
"""Write docs/protocol.md's byte-by-byte example from a real exchange with a running daemon.

    edged serve &                      # the shipped config.toml (digits model)
    python scripts/docs/protocol_example.py --write docs/protocol.md
    python scripts/docs/protocol_example.py --check docs/protocol.md   # does the doc still hold?

Frames are sent and read with a bare pyzmq DEALER (not ``edged.client``), so what is shown
is exactly what crosses the socket. ``--check`` compares what is deterministic (every
request byte, the reply's header keys, output names, dtypes, shapes and frame sizes);
timings and logits may differ between machines and variants.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import zmq

BEGIN = "<!-- protocol-example:begin (scripts/docs/protocol_example.py writes this part) -->"
END = "<!-- protocol-example:end -->"

#: An 8x8 grey "7", small enough to read in hex; the daemon resizes it to the model's input.
SEVEN = np.array([
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 60, 200, 230, 230, 230, 120, 0],
    [0, 0, 0, 0, 10, 220, 90, 0],
    [0, 0, 0, 0, 120, 200, 0, 0],
    [0, 0, 0, 20, 230, 60, 0, 0],
    [0, 0, 0, 150, 180, 0, 0, 0],
    [0, 0, 30, 230, 40, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
], np.uint8)


def request_frames(model: str) -> list[bytes]:
    header = {"v": 1, "id": 1, "op": "infer", "model": model,
              "inputs": [{"dtype": "uint8", "shape": list(SEVEN.shape), "encoding": "raw"}]}
    return [json.dumps(header, separators=(",", ":")).encode(), SEVEN.tobytes()]


def error_request_frames() -> list[bytes]:
    header = {"v": 1, "id": "bad-1", "model": "no-such-model",
              "inputs": [{"dtype": "uint8", "shape": [1], "encoding": "raw"}]}
    return [json.dumps(header, separators=(",", ":")).encode(), b"\x00"]


def exchange(endpoint: str, frames: list[bytes], timeout_s: float) -> list[bytes]:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
    try:
        sock.connect(endpoint)
        sock.send_multipart(frames)
        if not sock.poll(int(timeout_s * 1000)):
            raise SystemExit(f"protocol_example: no reply from {endpoint} within {timeout_s} s "
                             "(is `edged serve` running?)")
        return list(sock.recv_multipart())
    finally:
        sock.close()


def hexdump(data: bytes) -> str:
    """``xxd``-style: offset, 16 bytes in hex, the printable ones as text."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<47}  |{text}|")
    return "\n".join(lines)


def describe_frame(i: int, frame: bytes, what: str) -> str:
    return f"frame {i}, {len(frame)} bytes: {what}\n\n```\n{hexdump(frame)}\n```\n"


def render(model: str, req: list[bytes], reply: list[bytes], err_req: list[bytes],
           err_reply: list[bytes]) -> str:
    head = json.loads(reply[0])
    out: list[str] = [
        BEGIN, "",
        f"A real exchange with the `{model}` model ({head.get('variant')} variant), as a "
        "DEALER socket sends and receives it (a REQ socket adds an empty delimiter frame "
        "before frame 0 and strips it from the reply; the daemon's ROUTER adds and removes "
        "the peer identity, which the client never sees).", "",
        "**Request**: 2 frames.", "",
        describe_frame(0, req[0], f"the UTF-8 JSON header `{req[0].decode()}`"),
        describe_frame(1, req[1], f"input 0: uint8 {list(SEVEN.shape)}, C order, one byte per "
                                  "pixel (a grey 8x8 \"7\"; the daemon resizes it to 28x28)"),
        f"**Reply**: {len(reply)} frames.", "",
        describe_frame(0, reply[0], f"the UTF-8 JSON header `{reply[0].decode()}`"),
    ]
    for i, meta in enumerate(head.get("outputs", []), start=1):
        arr = np.frombuffer(reply[i], dtype=np.dtype(meta["dtype"]).newbyteorder("<"))
        values = ", ".join(f"{v:.4g}" for v in arr.reshape(-1)[:10])
        out.append(describe_frame(
            i, reply[i], f"output `{meta['name']}`: {meta['dtype']} {meta['shape']}, "
                         f"little-endian, C order: [{values}] (argmax {int(np.argmax(arr))})"))
    out += [
        "**An error**: the request", "",
        f"`{err_req[0].decode()}` + 1 byte", "",
        "is answered with one frame and no tensor frames:", "",
        describe_frame(0, err_reply[0], f"`{err_reply[0].decode()}`"),
        END,
    ]
    return "\n".join(out)


def doc_section(text: str, path: Path) -> str:
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, re.S)
    if m is None:
        raise SystemExit(f"protocol_example: {path} has no '{BEGIN}' ... '{END}' section")
    return m.group(0)


def _frame_dumps(section: str) -> list[str]:
    return re.findall(r"```\n(.*?)\n```", section, re.S)


def _shape_of(header_json: str) -> dict[str, Any]:
    h = json.loads(header_json)
    return {"keys": sorted(h), "status": h.get("status"),
            "outputs": h.get("outputs"), "timing": sorted(h.get("timing", {}))}


def check(section: str, fresh: str) -> list[str]:
    """Differences between the doc's example and a fresh one, beyond timings and values."""
    old, new = _frame_dumps(section), _frame_dumps(fresh)
    problems = []
    if len(old) != len(new):
        return [f"the doc shows {len(old)} frames; the daemon now sends {len(new)}"]
    for k in (0, 1):  # the request: every byte
        if old[k] != new[k]:
            problems.append(f"request frame {k} differs from what the script sends")
    headers = re.findall(r"the UTF-8 JSON header `(.*?)`", section)
    fresh_headers = re.findall(r"the UTF-8 JSON header `(.*?)`", fresh)
    if _shape_of(headers[1]) != _shape_of(fresh_headers[1]):
        problems.append(f"reply header changed shape: doc {headers[1]} vs now "
                        f"{fresh_headers[1]}")
    sizes = re.findall(r"^frame (\d+), (\d+) bytes", section, re.M)
    fresh_sizes = re.findall(r"^frame (\d+), (\d+) bytes", fresh, re.M)
    for (i, a), (_, b) in zip(sizes[3:], fresh_sizes[3:], strict=True):  # output frames
        if a != b:
            problems.append(f"reply frame {i}: {a} bytes in the doc, {b} now")
    error = r'`(\{"v":1,"id":"bad-1","status":.*?)`'
    err_old, err_new = re.findall(error, section), re.findall(error, fresh)
    if not err_new:
        problems.append("the error example is missing")
    if err_old != err_new:
        problems.append(f"error reply differs: doc {err_old} vs now {err_new}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", "-e",
                    default=os.environ.get("EDGED_ENDPOINT", "tcp://127.0.0.1:5555"))
    ap.add_argument("--model", default="digits")
    ap.add_argument("--timeout", type=float, default=10.0)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", type=Path, help="replace the example section of this file")
    mode.add_argument("--check", type=Path, help="exit 1 if this file's example is stale")
    args = ap.parse_args(argv)

    req = request_frames(args.model)
    reply = exchange(args.endpoint, req, args.timeout)
    if json.loads(reply[0]).get("status") != "OK":
        raise SystemExit(f"protocol_example: the daemon answered {reply[0].decode()}")
    err_req = error_request_frames()
    fresh = render(args.model, req, reply, err_req, exchange(args.endpoint, err_req,
                                                             args.timeout))
    if args.write:
        text = args.write.read_text()
        args.write.write_text(text.replace(doc_section(text, args.write), fresh))
        print(f"wrote the example into {args.write}")
    elif args.check:
        problems = check(doc_section(args.check.read_text(), args.check), fresh)
        for p in problems:
            print(f"{args.check}: {p}", file=sys.stderr)
        if problems:
            print("regenerate with: python scripts/docs/protocol_example.py --write "
                  f"{args.check}", file=sys.stderr)
            return 1
        print(f"{args.check}: the example matches the daemon")
    else:
        print(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
