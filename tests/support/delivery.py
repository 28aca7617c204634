"""Real parts for delivery tests: an OCI registry (Debian's ``docker-registry``, the CNCF
distribution registry) on loopback, a web server that honours ``Range`` (and can cut a
file short once, as a dropped connection does), EC key pairs, a small PKI (a root, an
intermediate and publisher certificates, made with ``cryptography``), and what ``edged
compile`` writes for the shipped digits model, ready for ``edged publish``.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from edged.testing.delivery import NoRegistry, keypair
from edged.testing.delivery import registry as _registry
from support.paths import MODELS

__all__ = ["Pki", "compiled", "faulty_digits", "keypair", "registry", "slow_digits",
           "web_server"]


@contextlib.contextmanager
def registry(root: Path) -> Iterator[str]:
    """The registry of ``edged.testing.delivery``; the test skips where it is absent."""
    try:
        with _registry(root) as host:
            yield host
    except NoRegistry as e:
        pytest.skip(str(e))


class Pki:
    """A fleet's CA as a publisher meets it: ``root`` (self-signed, on every device) signs
    ``intermediate``, which signs the publisher's ``leaf`` (KeyUsage digitalSignature, as
    model-signing requires of a signing certificate); ``stranger`` is another root with a
    leaf of its own, and ``no_usage`` a leaf of ``intermediate`` that allows no signing.
    Each certificate is ``NAME.crt`` and each key ``NAME.key`` (PEM) in ``folder``."""

    def __init__(self, folder: Path) -> None:
        import datetime

        self.folder = folder
        self._now = datetime.datetime.now(datetime.UTC)
        root = self._cert("root", None, ca=True)
        inter = self._cert("intermediate", root, ca=True)
        self._cert("leaf", inter, usage=True)
        self._cert("no_usage", inter, usage=False)
        stranger = self._cert("stranger", None, ca=True)
        self._cert("stranger_leaf", stranger, usage=True)

    def crt(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    def _cert(self, name: str, issuer: tuple[Any, Any] | None, ca: bool = False,
              usage: bool = False) -> tuple[Any, Any]:
        import datetime

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives import serialization as s
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"edged test {name}")])
        ikey, icert = issuer if issuer is not None else (key, None)
        b = (x509.CertificateBuilder().subject_name(subject)
             .issuer_name(icert.subject if icert is not None else subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(self._now - datetime.timedelta(days=1))
             .not_valid_after(self._now + datetime.timedelta(days=30)))
        if ca:
            b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            b = b.add_extension(x509.KeyUsage(False, False, False, False, False, True, True,
                                              False, False), critical=True)
        elif usage:
            b = b.add_extension(x509.KeyUsage(True, False, False, False, False, False, False,
                                              False, False), critical=True)
        cert = b.sign(ikey, hashes.SHA256())
        self.key(name).write_bytes(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8,
                                                     s.NoEncryption()))
        self.crt(name).write_bytes(cert.public_bytes(s.Encoding.PEM))
        return key, cert


def compiled(folder: Path, top: str = "cnn-fp32", flip_labels: float = 0.0,
             rungs: bool = True) -> Path:
    """What ``edged compile`` wrote for the digits model: ``top`` (and the INT8 rung below
    it when ``top`` is cnn-fp32, unless ``rungs`` is false) with their golden files,
    ``variants.toml``, the contract and the validation set; ``flip_labels`` of the labels
    are changed (a validation set the model is that much less accurate on)."""
    folder.mkdir(parents=True)
    ladder = [top] + (["cnn-int8"] if top == "cnn-fp32" and rungs else [])
    lines = []
    for name in ladder:
        for suffix in (".onnx", ".onnx.golden.npz"):
            shutil.copy(MODELS / f"{name}{suffix}", folder / f"{name}{suffix}")
        lines += ["[[models.variants]]", f'name = "{name}"', 'backend = "onnxruntime"',
                  f'path = "../somewhere/{name}.onnx"', "[models.variants.options]",
                  "threads = 1", ""]
    (folder / "variants.toml").write_text("\n".join(lines))
    card = json.loads((MODELS / "model.json").read_text())
    (folder / "model.json").write_text(json.dumps(card))
    with np.load(MODELS / "validation.npz") as z:
        x, y = z["x"], z["y"].copy()
    n = round(flip_labels * len(y))
    y[:n] = (y[:n] + 1) % 10
    np.savez(folder / "validation.npz", x=x, y=y)
    return folder


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """A static file server that honours ``Range: bytes=N-`` (206) and, for files named in
    ``cut``, sends half of the first response and closes the connection."""

    cut: ClassVar[set[str]] = set()
    #: files sent slowly (64 KiB every 50 ms): a download that takes a while
    slow: ClassVar[set[str]] = set()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
        body = data[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if path.name in self.cut:
            self.cut.discard(path.name)
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)
            return
        if path.name in self.slow:
            for i in range(0, len(body), 1 << 16):
                try:
                    self.wfile.write(body[i:i + (1 << 16)])
                except OSError:
                    return
                time.sleep(0.05)
            return
        self.wfile.write(body)


@contextlib.contextmanager
def web_server(root: Path) -> Iterator[tuple[str, type[RangeHandler]]]:
    handler = type("Handler", (RangeHandler,), {"cut": set(), "slow": set()})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          functools.partial(handler, directory=str(root)))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


def slow_digits(path: Path, trips: int = 15000) -> Path:
    """The digits CNN with the same answers, each batch waiting for a Loop of ``trips``
    Tanh steps started from the input (ONNX Runtime cannot fold it away): a version that
    passes the accuracy gate and answers several times slower."""
    import onnx
    from onnx import helper, numpy_helper

    from support.slow_model import tanh_loop_body

    m = onnx.load(str(MODELS / "cnn-fp32.onnx"))
    g = m.graph
    out = g.output[0].name
    inp = g.input[0].name
    for node in g.node:
        node.output[:] = [f"{out}__raw" if o == out else o for o in node.output]
    body = tanh_loop_body()
    g.initializer.extend([numpy_helper.from_array(np.array(trips, np.int64), "slow_trips"),
                          numpy_helper.from_array(np.array(True), "slow_cond"),
                          numpy_helper.from_array(np.array([1], np.int64), "slow_one"),
                          numpy_helper.from_array(np.array([0.0], np.float32), "slow_zero")])
    g.node.extend([
        helper.make_node("ReduceMean", [inp], ["slow_mean"], keepdims=0),
        helper.make_node("Reshape", ["slow_mean", "slow_one"], ["slow_h0"]),
        helper.make_node("Loop", ["slow_trips", "slow_cond", "slow_h0"], ["slow_h"], body=body),
        helper.make_node("Mul", ["slow_h", "slow_zero"], ["slow_z"]),
        helper.make_node("Add", [f"{out}__raw", "slow_z"], [out])])
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def faulty_digits(path: Path) -> Path:
    """The digits CNN with the same answers on every input its validation set and golden
    file hold (pixels scaled to 0..1), failing (an ONNX Runtime error: a Gather index out
    of bounds) on a tensor with a value of 2 or more, which the version before it
    computes: a version that passes its gate and fails live requests its checks lacked."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(str(MODELS / "cnn-fp32.onnx"))
    g = m.graph
    out = g.output[0].name
    inp = g.input[0].name
    for node in g.node:
        node.output[:] = [f"{out}__raw" if o == out else o for o in node.output]
    g.initializer.extend([numpy_helper.from_array(np.zeros(2, np.float32), "fault_table"),
                          numpy_helper.from_array(np.array(0.0, np.float32), "fault_zero")])
    g.node.extend([
        helper.make_node("ReduceMax", [inp], ["fault_max"], keepdims=0),
        helper.make_node("Floor", ["fault_max"], ["fault_floor"]),
        helper.make_node("Cast", ["fault_floor"], ["fault_index"], to=onnx.TensorProto.INT64),
        helper.make_node("Gather", ["fault_table", "fault_index"], ["fault_value"]),
        helper.make_node("Mul", ["fault_value", "fault_zero"], ["fault_z"]),
        helper.make_node("Add", [f"{out}__raw", "fault_z"], [out])])
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path
