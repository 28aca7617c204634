"""Turn what a camera sends (a JPEG/PNG, or a raw uint8 HxWxC frame) into the model's tensor.

Why in the daemon: camera and drone apps should not need to know a model's layout,
colour order or normalisation, and swapping to a lighter variant must not change
what clients send. The steps are OpenCV calls (decode, colour convert, resize) plus
one fused numpy expression for scale/mean/std, in the order models are trained with.
"""

from __future__ import annotations

import cv2
import numpy as np

from edged.config.preprocess import PreprocessConfig
from edged.errors import InvalidArgument

#: the names of ``INTERPOLATIONS`` as OpenCV's flags
_INTERP = {
    "nearest": cv2.INTER_NEAREST,
    "linear": cv2.INTER_LINEAR,
    "area": cv2.INTER_AREA,
    "cubic": cv2.INTER_CUBIC,
}


def decode_image(data: bytes | memoryview, max_pixels: int,
                 encoding: str | None = None) -> np.ndarray:
    """Decode a JPEG/PNG to uint8 HxW or HxWxC (BGR/BGRA), refusing huge or corrupt images.

    ``encoding`` ("jpeg"/"png") is what the client declared: the bytes must be that
    format, so OpenCV's other decoders (TIFF, WebP, ...) are never reached from a socket.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    head = buf[:8].tobytes()
    actual = ("png" if head == b"\x89PNG\r\n\x1a\n" else
              "jpeg" if head[:3] == b"\xff\xd8\xff" else None)
    if actual is None:
        raise InvalidArgument("could not decode the image: not a JPEG or PNG (bad signature)")
    if encoding is not None and actual != encoding:
        raise InvalidArgument(f"the input is declared {encoding!r} but the data is {actual!r}")
    # Check the container before the decoder sees it: OpenCV's PNG reader allocates what
    # a chunk's length field claims, so a 600-byte file could cost gigabytes.
    _check_structure(buf.tobytes())
    # Read the size from the header first so a 100-byte "image" cannot make us allocate GBs.
    ok, reader = _peek_size(buf)
    if ok and reader[0] * reader[1] > max_pixels:
        raise InvalidArgument(
            f"image is {reader[1]}x{reader[0]} pixels; the limit is {max_pixels} pixels"
        )
    img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if img is None or img.size == 0:
        raise InvalidArgument("could not decode the image: not a valid JPEG or PNG")
    if img.dtype != np.uint8:  # 16-bit PNG
        img = (img >> 8).astype(np.uint8) if img.dtype == np.uint16 else img.astype(np.uint8)
    return img


#: the channel counts a frame may have: grey, colour (BGR/RGB), colour with alpha
FRAME_CHANNELS = (1, 3, 4)


def check_frame(img: np.ndarray) -> None:
    """Refuse, as the client's error, a frame preprocessing cannot take: not uint8, not
    HxW or HxWxC, a channel count other than 1, 3 or 4, or no pixels.

    Why one check, run before any OpenCV call: OpenCV takes some malformed frames and
    fails deep inside (a 5-channel frame in the letterbox's ``copyMakeBorder``), which
    would answer INTERNAL for what is the client's mistake. Every road to a model's
    tensor (a native or KServe raw frame, a Frigate frame, a pipeline's frame) passes
    through ``InputContract``, which calls this first."""
    shape = list(img.shape)
    if img.dtype != np.uint8 or img.ndim not in (2, 3) or (
            img.ndim == 3 and img.shape[2] not in FRAME_CHANNELS):
        raise InvalidArgument(
            f"an image frame must be uint8 HxW (1 channel) or HxWxC with C = 1, 3 or 4 "
            f"channels (grey, colour, colour with alpha); got {img.dtype} {shape}"
            + (f": {img.shape[2]} channels" if img.ndim == 3 else ""))
    if img.shape[0] == 0 or img.shape[1] == 0:
        raise InvalidArgument(f"empty image frame {shape}: an image frame must have at least "
                              f"one pixel, HxW or HxWxC with C = 1, 3 or 4 channels")


def _check_structure(b: bytes) -> None:
    """Refuse PNG chunks and JPEG segments whose length runs past the end of the data."""
    n = len(b)
    if b[:8] == b"\x89PNG\r\n\x1a\n":
        i = 8
        while i + 8 <= n:
            length = int.from_bytes(b[i:i + 4], "big")
            ctype = b[i + 4:i + 8]
            if length > n - i - 12:
                raise InvalidArgument(
                    f"corrupt PNG: chunk {ctype!r} claims {length} bytes but only "
                    f"{max(0, n - i - 12)} remain")
            i += 12 + length
            if ctype == b"IEND":
                return
        return
    if b[:2] == b"\xff\xd8":
        i = 2
        while i + 4 <= n:
            if b[i] != 0xFF:
                return  # entropy-coded data: the decoder bounds itself by the image size
            marker = b[i + 1]
            if marker == 0xFF:
                i += 1
                continue
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            if marker in (0xD9, 0xDA):  # end of image / start of scan
                return
            seg = int.from_bytes(b[i + 2:i + 4], "big")
            if seg < 2 or i + 2 + seg > n:
                raise InvalidArgument(f"corrupt JPEG: segment 0x{marker:02X} claims {seg} bytes "
                                      "past the end of the data")
            i += 2 + seg


def _peek_size(buf: np.ndarray) -> tuple[bool, tuple[int, int]]:
    """(height, width) from a PNG IHDR or JPEG SOF marker, without decoding."""
    b = buf.tobytes()[:65536]
    if b[:8] == b"\x89PNG\r\n\x1a\n" and len(b) >= 24:
        w = int.from_bytes(b[16:20], "big")
        h = int.from_bytes(b[20:24], "big")
        return True, (h, w)
    if b[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(b):
            if b[i] != 0xFF:
                i += 1
                continue
            marker = b[i + 1]
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE,
                          0xCF):
                h = int.from_bytes(b[i + 5:i + 7], "big")
                w = int.from_bytes(b[i + 7:i + 9], "big")
                return True, (h, w)
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            seg = int.from_bytes(b[i + 2:i + 4], "big")
            i += 2 + seg
    return False, (0, 0)


class Preprocessor:
    """A compiled preprocessing plan for one model (constants precomputed once)."""

    def __init__(self, cfg: PreprocessConfig) -> None:
        self.cfg = cfg
        c = cfg.channels
        mean = np.array(cfg.mean if len(cfg.mean) == c else cfg.mean * c, dtype=np.float32)
        std = np.array(cfg.std if len(cfg.std) == c else cfg.std * c, dtype=np.float32)
        # x*scale - mean) / std == x*(scale/std) + (-mean/std): one multiply-add per pixel.
        self._mul = (cfg.scale / std).astype(np.float32)
        self._add = (-mean / std).astype(np.float32)
        self._interp = _INTERP[cfg.interpolation]
        self._identity = bool(np.all(self._mul == 1.0) and np.all(self._add == 0.0))
        # x*mul + add == (x - mean_px) * mul: blobFromImage's form, per channel.
        self._blob = bool(np.all(self._mul != 0))
        self._blob_scale = tuple(float(m) for m in self._mul)
        self._blob_mean = tuple(float(-a / m) if m else 0.0
                                for a, m in zip(self._add, self._mul, strict=True))

    def from_frame(self, img: np.ndarray, source_color: str | None = None,
                   size: tuple[int, int] | None = None) -> np.ndarray:
        """uint8 HxW / HxWxC (C in 1,3,4) -> model tensor with a batch dim of 1.

        ``size`` (width, height) overrides the configured size: a detector's rungs may
        take different input resolutions."""
        check_frame(img)
        src = source_color or self.cfg.raw_color
        cfg = self.cfg
        w, h = size or (cfg.width, cfg.height)
        if img.ndim == 3 and img.shape[2] in (3, 4) and cfg.color != "gray":
            return self._color_frame(img, src, w, h)
        img = self._convert_color(img, src)
        if img.shape[0] != h or img.shape[1] != w:
            img = cv2.resize(img, (w, h), interpolation=self._interp)
        if img.ndim == 2:
            img = img[:, :, None]
        return self._finish(img)

    def _color_frame(self, img: np.ndarray, src: str, w: int, h: int) -> np.ndarray:
        """A camera's colour frame, in one pass over the full frame: resize first (a colour
        swap or alpha drop commutes with resizing, so the result is the same), then swap,
        scale, normalise and lay out the small image in one OpenCV call. For a 1280x720
        BGR frame this is 4-8x faster than converting the full frame first
        (docs/benchmarks.md, "Raw frames")."""
        cfg = self.cfg
        if img.shape[0] != h or img.shape[1] != w:
            img = cv2.resize(img, (w, h), interpolation=self._interp)
        if img.shape[2] == 4:
            img = img[:, :, :3]
        swap = cfg.color != src
        if cfg.dtype == "uint8" or cfg.layout != "NCHW" or not self._blob:
            img = np.ascontiguousarray(img[:, :, ::-1]) if swap else img
            return self._finish(img)
        blob = cv2.dnn.blobFromImageWithParams(
            np.ascontiguousarray(img), cv2.dnn.Image2BlobParams(
                self._blob_scale, (w, h), self._blob_mean, swap, cv2.CV_32F))
        return blob.astype(np.float16) if cfg.dtype == "float16" else blob

    def _finish(self, img: np.ndarray) -> np.ndarray:
        """HxWxC uint8 in the model's colour order -> tensor (NHWC, or uint8 NCHW)."""
        cfg = self.cfg
        if cfg.dtype == "uint8":
            out = img
        else:
            out = img.astype(np.float32)
            if not self._identity:
                out *= self._mul
                out += self._add
            if cfg.dtype == "float16":
                out = out.astype(np.float16)
        if cfg.layout == "NCHW":
            out = out.transpose(2, 0, 1)
        return np.ascontiguousarray(out)[None]

    def _convert_color(self, img: np.ndarray, src: str) -> np.ndarray:
        want = self.cfg.color
        if img.ndim == 3 and img.shape[2] == 1:
            img = img[:, :, 0]
        if img.ndim == 2:
            return img if want == "gray" else cv2.cvtColor(img, cv2.COLOR_GRAY2BGR if want == "bgr"
                                                           else cv2.COLOR_GRAY2RGB)
        if img.shape[2] == 4:
            code = cv2.COLOR_BGRA2BGR if src == "bgr" else cv2.COLOR_RGBA2RGB
            img = cv2.cvtColor(img, code)
        if want == "gray":
            return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY if src == "bgr" else cv2.COLOR_RGB2GRAY)
        if want != src:
            return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        return img
