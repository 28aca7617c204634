"""The live fuzzer's messages: malformed, truncated, mutated, oversized and random
multipart requests, each with the statuses it may legitimately get back.

Why a generator of (frames, allowed statuses) pairs: the lanes in ``live`` can then
check every reply against what *that* message may get, whatever its kind.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from edged.testing.harness import ROOT

MODELS = ROOT / "models" / "digits"

CLIENT = frozenset({"INVALID_ARGUMENT", "UNSUPPORTED_VERSION", "NOT_FOUND"})
# A mutated message may turn out valid; these are all legitimate answers to one.
ANY = CLIENT | {"OK", "DEADLINE_EXCEEDED", "DROPPED", "RESOURCE_EXHAUSTED"}

#: [server.limits] the fuzz daemon runs with: small enough that "over the limit" is cheap.
FUZZ_LIMITS = """
[server.limits]
max_message_bytes = 1048576
"""
MAX_MESSAGE_BYTES = 1 << 20


@dataclass
class Msg:
    kind: str
    frames: list[bytes]
    expect: frozenset[str]
    rid: str | None  # the id put in the header, if any


def valid_header(rid: str, **kw: Any) -> dict[str, Any]:
    return {"v": 1, "id": rid, "op": "infer", "model": "digits",
            "inputs": [{"name": "input", "dtype": "float32", "shape": [1, 1, 28, 28]}], **kw}


def _junk_json(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.5:
        return rng.choice([None, True, False, 0, -1, 1, 2**63, -(2**63) - 1, 1.5, 1e308,
                           float("inf"), float("nan"), "", "x" * rng.randrange(0, 300),
                           "\u0000", "\ud800", "float32", "digits", "infer", "jpeg",
                           rng.randrange(-10**6, 10**6)])
    if r < 0.75:
        return [_junk_json(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    return {rng.choice(["v", "id", "op", "inputs", "shape", "dtype", "", "x"]):
            _junk_json(rng, depth + 1) for _ in range(rng.randrange(0, 4))}


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode("utf-8", "surrogatepass")


class Generator:
    """Deterministic (per seed) stream of hostile messages and what each may get back."""

    def __init__(self, seed: int, exclude: frozenset[str] = frozenset()) -> None:
        self.rng = random.Random(seed)
        x = np.load(MODELS / "validation.npz")["x"][:16]
        self.tensors = [(x[i].astype(np.float32) / 255.0)[None, None].tobytes()
                        for i in range(len(x))]
        self.images = [p.read_bytes() for p in sorted((MODELS / "samples").glob("digit*"))]
        self.n = 0
        self.kinds: list[tuple[str, Callable[[str], tuple[list[bytes], frozenset[str]]], int]] = [
            ("random-frames", self._random_frames, 10),
            ("truncated-header", self._truncated_header, 8),
            ("flipped-header", self._flipped_header, 8),
            ("junk-key", self._junk_key, 12),
            ("junk-input-meta", self._junk_meta, 12),
            ("tensor-bytes", self._tensor_bytes, 8),
            ("frame-count", self._frame_count, 6),
            ("image", self._image, 8),
            ("uint8-frame", self._uint8_frame, 6),
            ("huge-shape", self._huge_shape, 5),
            ("version", self._version, 4),
            ("unknown-model-or-op", self._unknown, 4),
            ("many-frames", self._many_frames, 2),
            ("over-total-size", self._over_total, 1),
            ("valid-odd-options", self._odd_options, 6),
        ]
        self._weights = [0 if k in exclude else w for k, _, w in self.kinds]

    def __iter__(self) -> Iterator[Msg]:
        return self

    def __next__(self) -> Msg:
        self.n += 1
        rid = f"fz-{self.n}"
        kind, make, _ = self.rng.choices(self.kinds, self._weights)[0]
        frames, expect = make(rid)
        return Msg(kind, frames, expect, rid)

    # -- kinds ----------------------------------------------------------------------------
    def _tensor(self) -> bytes:
        return self.rng.choice(self.tensors)

    def _random_frames(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        frames = [self.rng.randbytes(self.rng.choice([0, 1, 2, 7, 64, 300, 3000]))
                  for _ in range(self.rng.randrange(1, 5))]
        if frames[0][:1] in (b"{", b"[") or frames[0].strip()[:1].isdigit():
            frames[0] = b"\xff" + frames[0]  # keep it garbage: never valid JSON by chance
        if len(frames[0]) == 0 and len(frames) > 1 and frames[1][:1] in (b"{", b"["):
            frames[1] = b"\xff" + frames[1]
        return frames, CLIENT

    def _truncated_header(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = dumps(valid_header(rid))
        cut = self.rng.randrange(1, len(h))  # a JSON object cut short is never valid
        return [h[:cut], self._tensor()], CLIENT

    def _flipped_header(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = bytearray(dumps(valid_header(rid)))
        for _ in range(self.rng.randrange(1, 4)):
            h[self.rng.randrange(len(h))] = self.rng.randrange(256)
        return [bytes(h), self._tensor()], ANY

    def _junk_key(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = valid_header(rid)
        key = self.rng.choice(["v", "op", "model", "inputs", "timeout_ms", "priority",
                               "stream", "outputs", "id", "colour", ""])
        if key == "id":
            h["id"] = _junk_json(self.rng)
        elif self.rng.random() < 0.2:
            h.pop(key, None)
        else:
            h[key] = _junk_json(self.rng)
        return [dumps(h), self._tensor()], ANY

    def _junk_meta(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = valid_header(rid)
        meta = h["inputs"][0]
        key = self.rng.choice(["name", "dtype", "shape", "encoding", "extra"])
        r = self.rng.random()
        if r < 0.2:
            meta.pop(key, None)
        elif key == "shape" and r < 0.7:
            meta["shape"] = [self.rng.choice([-1, 0, 1, 2, 3, 27, 28, 29, 784, 2**20, 2**31])
                             for _ in range(self.rng.randrange(0, 9))]
        elif key == "dtype" and r < 0.7:
            meta["dtype"] = self.rng.choice(["uint8", "int8", "float16", "float64", "int64",
                                             "bool", "object", "float128", ">f4", "<f4", "f4"])
        else:
            meta[key] = _junk_json(self.rng)
        return [dumps(h), self._tensor()], ANY

    def _tensor_bytes(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        t = self._tensor()
        r = self.rng.random()
        if r < 0.3:
            return [dumps(valid_header(rid)), t[: self.rng.randrange(0, len(t))]], CLIENT
        if r < 0.6:
            extra = self.rng.randbytes(self.rng.randrange(1, 64))
            return [dumps(valid_header(rid)), t + extra], CLIENT
        # Right length, random bits: NaNs, infinities, denormals: computed, not a crash.
        return [dumps(valid_header(rid)), self.rng.randbytes(len(t))], ANY

    def _frame_count(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = dumps(valid_header(rid))
        if self.rng.random() < 0.5:
            return [h], CLIENT
        return [h, self._tensor(), *[self._tensor()] * self.rng.randrange(1, 4)], CLIENT

    def _image(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        enc = self.rng.choice(["jpeg", "png"])
        img = bytearray(self.rng.choice(self.images))
        r = self.rng.random()
        if r < 0.3:
            data = bytes(img[: self.rng.randrange(1, len(img))])
        elif r < 0.6:
            for _ in range(self.rng.randrange(1, 10)):
                img[self.rng.randrange(len(img))] = self.rng.randrange(256)
            data = bytes(img)
        elif r < 0.8:
            data = self.rng.randbytes(self.rng.randrange(1, 4000))
        else:  # a JPEG SOF claiming up to 65535 x 65535
            w, hh = self.rng.randrange(1, 65536), self.rng.randrange(1, 65536)
            data = (b"\xff\xd8\xff\xc0\x00\x11\x08" + hh.to_bytes(2, "big")
                    + w.to_bytes(2, "big") + b"\x03" + self.rng.randbytes(64))
        h = {"v": 1, "id": rid, "model": "digits", "inputs": [{"encoding": enc}]}
        return [dumps(h), data], ANY

    def _uint8_frame(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        shape = [self.rng.randrange(0, 70), self.rng.randrange(0, 70)]
        if self.rng.random() < 0.6:
            shape.append(self.rng.choice([0, 1, 2, 3, 4, 5, 7]))
        n = int(np.prod(shape))
        h = {"v": 1, "id": rid, "model": "digits",
             "inputs": [{"dtype": "uint8", "shape": shape}]}
        return [dumps(h), self.rng.randbytes(n)], ANY

    def _huge_shape(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        shape = [self.rng.choice([1 << 20, 1 << 21, 1 << 30, 2**62, 1 << 13])
                 for _ in range(self.rng.randrange(1, 9))]
        h = valid_header(rid)
        h["inputs"][0]["shape"] = shape
        h["inputs"][0]["dtype"] = self.rng.choice(["float64", "uint8"])
        if all(d <= (1 << 20) for d in shape) and np.prod(shape, dtype=object) <= (1 << 26):
            shape.append(1 << 21)  # make sure it is over some limit
        return [dumps(h), self.rng.randbytes(self.rng.randrange(0, 64))], CLIENT

    def _version(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        h = valid_header(rid)
        h["v"] = self.rng.choice([0, 2, 3, -1, "1", "v1", None, [], {}, 1.5])
        if self.rng.random() < 0.2:
            del h["v"]
        return [dumps(h), self._tensor()], frozenset({"UNSUPPORTED_VERSION"})

    def _unknown(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        if self.rng.random() < 0.5:
            h = valid_header(rid, model=self.rng.choice(["nope", "digits ", "DIGITS", "\u0000"]))
        else:
            h = {"v": 1, "id": rid, "op": self.rng.choice(["explode", "reload", "status", "Infer",
                                                            "load", "unload", "level"])}
            return [dumps(h)], frozenset({"NOT_FOUND"})
        return [dumps(h), self._tensor()], frozenset({"NOT_FOUND"})

    def _many_frames(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        n = self.rng.randrange(20, 300)
        return [dumps(valid_header(rid)), *[b"\x00" * self.rng.randrange(0, 8)] * n], CLIENT

    def _over_total(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        # Each frame under MAXMSGSIZE (libzmq lets it in), the sum over the limit.
        half = MAX_MESSAGE_BYTES // 2 + 1024
        h = {"v": 1, "id": rid, "model": "digits",
             "inputs": [{"dtype": "uint8", "shape": [half]}, {"dtype": "uint8", "shape": [half]}]}
        return [dumps(h), bytes(half), bytes(half)], frozenset({"RESOURCE_EXHAUSTED"})

    def _odd_options(self, rid: str) -> tuple[list[bytes], frozenset[str]]:
        opts = self.rng.choice([
            {"timeout_ms": self.rng.choice([1e-9, 0.001, 1e12, 5])},
            {"priority": self.rng.choice([0, 1000, 999])},
            {"stream": "s" + str(self.rng.randrange(3))},
            {"outputs": ["logits", "logits"]},
            {"id": self.rng.choice([2**63 - 1, -(2**63), "", "\u00e9" * 256])},
        ])
        h = valid_header(rid, **opts)
        return [dumps(h), self._tensor()], ANY


