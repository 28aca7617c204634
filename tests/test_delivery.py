"""Model delivery with real parts (issue 30, edged/delivery/, edged/server/delivery/): a
version published once with ``edged publish`` (signed with a key pair made here, offline,
or with a publisher's certificate of a CA made here) reaches a running daemon from a real
OCI registry (Debian's ``docker-registry``, started by the test), from a folder and from a
local web server; every bad input is refused with its reason while the old version serves
on.

One daemon serves four copies of the shipped digits model, three with a source of one
kind each and a public key, one (``digits_cert``) trusting a root certificate; each test
publishes to its source and pulls with ``edged ctl pull``.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.configs import DIGITS_PREPROCESS, config, model_table, variant
from support.daemons import Daemon
from support.delivery import Pki, compiled, keypair, registry, web_server
from support.digits import X, Y, run_edged, tensor
from support.paths import MODELS

from edged.delivery.bundle import pack
from edged.delivery.sources import open_source
from edged.delivery.trust import sign

pytest.importorskip("model_signing", reason="delivery needs pip install 'edged[delivery]'")
pytest.importorskip("oras", reason="delivery needs pip install 'edged[delivery]'")

MODELS_ = ("digits", "digits_oci", "digits_http")
#: the model whose devices trust a root certificate, not a key
CERT_MODEL = "digits_cert"


class World:
    """The daemon, its sources and the keys."""

    def __init__(self, tmp: Path, oci: str, web: str, cut: Any) -> None:
        self.tmp, self.oci, self.web, self.cut = tmp, oci, web, cut
        self.key, self.pub = keypair(tmp)
        self.other_key, _ = keypair(tmp, "stranger")
        (tmp / "pki").mkdir()
        self.pki = Pki(tmp / "pki")
        self.folder = tmp / "repo"
        self.www = tmp / "www"
        self.d: Daemon | None = None
        self.n = 0

    def url(self, model: str) -> str:
        return {"digits": f"file://{self.folder}", "digits_oci":
                f"oci://{self.oci}/edged/digits:stable", "digits_http": self.web,
                CERT_MODEL: f"file://{self.tmp / 'repo-cert'}"}[model]

    def publish_dir(self, model: str) -> str:
        """Where ``edged publish --to`` writes for ``model`` (the web server's folder)."""
        return str(self.www) if model == "digits_http" else self.url(model)

    def publish(self, model: str, version: str, src: Path, key: Path | None = None,
                tamper: Any = None, accuracy: float = 0.9978,
                cert: tuple[str, str] | None = None) -> None:
        """Pack, sign (with ``key``, default the publisher's; None after ``tamper``; with
        ``cert`` = (leaf, issuer), the PKI's leaf key, certificate and issuer), and put
        it at the model's source; ``tamper(bundle)`` changes it after signing."""
        out = self.tmp / f"bundle-{model}-{version}"
        m = pack(src, out, model, version, accuracy)
        if cert is not None:
            leaf, issuer = cert
            sign(out, self.pki.key(leaf), certificate=self.pki.crt(leaf),
                 chain=(self.pki.crt(issuer),))
        elif key is not False:
            sign(out, key or self.key)
        if tamper is not None:
            tamper(out)
        source = open_source(self.publish_dir(model), insecure=True)
        tag = ("stable",) if model == "digits_oci" else ()
        source.publish(out, model, version, m.digest, tag)

    def pull(self, model: str, version: str | None = None) -> dict[str, Any]:
        assert self.d is not None
        msg: dict[str, Any] = {"op": "pull", "model": model}
        if version:
            msg["version"] = version
        return self.d.ctl(msg, timeout=180)

    def serving(self, model: str) -> str:
        """The variant that answers a request now (it names the version)."""
        assert self.d is not None
        with self.d.client(timeout_s=30) as c:
            r = c.infer(model, tensor(0))
            assert r.ok and int(np.argmax(r.outputs["logits"])) == int(Y[0])
            return str(r.variant)


def daemon_config(w: World) -> Path:
    tables = []
    for m in (*MODELS_, CERT_MODEL):
        trust = (f'certificate_chain = ["{w.pki.crt("root")}"]' if m == CERT_MODEL else
                 f'public_key = "{w.pub}"')
        extra = (f'[models.source]\nurl = "{w.url(m)}"\n{trust}\n'
                 f"poll_s = 0\nmax_bytes = 3000000\n" + ("insecure = true\n"
                                                         if m == "digits_oci" else "")
                 + "[models.rollout]\nshadow_s = 1\nbuild_rungs = false\n")
        tables.append(model_table(m, [variant("cnn-fp32", MODELS / "cnn-fp32.onnx")],
                                  max_batch_size=8, preprocess=DIGITS_PREPROCESS,
                                  extra=extra))
    return config(w.tmp, models=tables,
                  server=f'drain_timeout_s = 2.0\nstate_dir = "{w.tmp / "state"}"\n')


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("delivery")
    (tmp / "www").mkdir()
    with registry(tmp) as oci, web_server(tmp / "www") as (web, handler):
        w = World(tmp, oci, web, handler.cut)
        w.d = Daemon(daemon_config(w), tmp, metrics=True)
        try:
            yield w
        finally:
            w.d.stop()


def refused(r: dict[str, Any], stage: str, reason: str, words: str) -> None:
    assert r["status"] != "OK", r
    last = r["delivery"]["last_refusal"]
    assert (last["stage"], last["reason"]) == (stage, reason), last
    assert words in last["message"], last


# -- the happy path, from each kind of source ---------------------------------------------

@pytest.mark.parametrize("model", MODELS_)
def test_a_signed_version_published_once_is_pulled_gated_and_served(world: World,
                                                                    model: str) -> None:
    src = compiled(world.tmp / f"compiled-{model}")
    args = ["publish", str(src), "--to", world.publish_dir(model), "--sign", str(world.key),
            "--model", model, "--version", "v2", "--insecure"]
    out = run_edged(*args)
    assert out.returncode == 0, out.stderr
    assert "published" in out.stdout and "signed" in out.stdout
    assert world.serving(model) == "cnn-fp32"  # the configured version serves until then
    r = world.pull(model)
    assert r["status"] == "OK", r
    e = r["delivery"]
    assert e["version"] == "v2" and e["stage"] == "watching", e  # [models.rollout] watch_s
    assert e["gate"]["accuracy_pct"] >= 97.0, e
    assert world.serving(model) == "cnn-fp32@v2"  # replies name the new version
    assert world.pull(model)["delivery"]["version"] == "v2"  # nothing new: nothing changes


# -- every bad input: refused with its reason, the old version serves on --------------------

def test_an_unsigned_version_is_refused_before_it_is_downloaded(world: World) -> None:
    world.publish("digits_oci", "v3-unsigned", compiled(world.tmp / "c-unsigned"), key=False)
    r = world.pull("digits_oci", "v3-unsigned")
    refused(r, "verifying", "unsigned", "no signature")
    assert world.serving("digits_oci") == "cnn-fp32@v2"


def test_a_version_signed_by_another_key_is_refused(world: World) -> None:
    world.publish("digits", "v3-stranger", compiled(world.tmp / "c-stranger"),
                  key=world.other_key)
    refused(world.pull("digits", "v3-stranger"), "verifying", "signature",
            "does not verify")
    assert world.serving("digits") == "cnn-fp32@v2"


def test_a_file_changed_after_signing_is_refused(world: World) -> None:
    def change(out: Path) -> None:  # one byte of a weight, the size unchanged
        p = out / "cnn-int8.onnx"
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data))

    world.publish("digits", "v3-changed", compiled(world.tmp / "c-changed"), tamper=change)
    refused(world.pull("digits", "v3-changed"), "verifying", "digest",
            "changed after signing")
    assert world.serving("digits") == "cnn-fp32@v2"


def test_a_file_with_a_byte_appended_is_a_damaged_bundle_not_a_limit(world: World) -> None:
    def append(out: Path) -> None:
        with (out / "cnn-int8.onnx").open("ab") as f:
            f.write(b"\0")

    world.publish("digits", "v3-appended", compiled(world.tmp / "c-appended"), tamper=append)
    r = world.pull("digits", "v3-appended")
    refused(r, "verifying", "digest", "damaged")
    assert "limit" not in r["delivery"]["last_refusal"]["message"]
    assert world.serving("digits") == "cnn-fp32@v2"


def test_a_manifest_naming_a_missing_file_is_refused(world: World) -> None:
    world.publish("digits", "v3-missing", compiled(world.tmp / "c-missing"),
                  tamper=lambda out: (out / "cnn-int8.onnx.golden.npz").unlink())
    refused(world.pull("digits", "v3-missing"), "downloading", "missing", "golden")
    assert world.serving("digits") == "cnn-fp32@v2"


def test_a_bundle_over_the_size_limit_is_refused_before_it_is_fetched(world: World) -> None:
    src = compiled(world.tmp / "c-big")
    (src / "padding.golden.npz").write_bytes(bytes(3_000_000))  # packed as a golden file
    world.publish("digits", "v3-big", src)
    refused(world.pull("digits", "v3-big"), "downloading", "too_large", "max_bytes")
    assert not list((world.tmp / "state" / "store" / "incoming").glob("*/*.onnx"))
    assert world.serving("digits") == "cnn-fp32@v2"


def test_a_contract_that_does_not_fit_is_refused(world: World) -> None:
    src = compiled(world.tmp / "c-contract")
    shutil.copy(MODELS.parent / "digits-det" / "det-fp32.onnx", src / "cnn-fp32.onnx")
    (src / "cnn-fp32.onnx.golden.npz").unlink()
    world.publish("digits", "v3-contract", src)
    r = world.pull("digits", "v3-contract")
    assert r["delivery"]["last_refusal"]["stage"] == "gating", r
    assert r["delivery"]["last_refusal"]["reason"] in ("contract", "load"), r
    assert world.serving("digits") == "cnn-fp32@v2"


def test_a_version_5_points_less_accurate_on_its_own_validation_set_is_refused(
        world: World) -> None:
    # the validation set's labels disagree with the model on 6% of its rows
    world.publish("digits", "v3-worse", compiled(world.tmp / "c-worse", flip_labels=0.06))
    r = world.pull("digits", "v3-worse")
    refused(r, "gating", "accuracy", "points below")
    assert world.serving("digits") == "cnn-fp32@v2"


def test_a_truncated_download_is_refused_and_the_next_pull_resumes_it(world: World) -> None:
    world.publish("digits_http", "v3", compiled(world.tmp / "c-http3", top="small-fp32"),
                  accuracy=0.9867)
    world.cut.add("small-fp32.onnx")  # the connection drops half-way, once
    refused(world.pull("digits_http", "v3"), "downloading", "truncated", "resumes")
    assert world.serving("digits_http") == "cnn-fp32@v2"
    part = list((world.tmp / "state" / "store" / "incoming").glob("*/small-fp32.onnx"))
    assert part and 0 < part[0].stat().st_size < (MODELS / "small-fp32.onnx").stat().st_size
    r = world.pull("digits_http", "v3")
    assert r["status"] == "OK" and r["delivery"]["version"] == "v3", r
    assert world.serving("digits_http") == "small-fp32@v3"


# -- a certificate identity: the device trusts a root, the publisher signs with its leaf -----

def test_a_version_signed_with_a_certificate_of_the_fleets_ca_is_pulled_and_served(
        world: World) -> None:
    """The publisher's leaf is issued by an intermediate of the root the device trusts;
    ``--cert-chain`` carries the intermediate in the signature."""
    assert world.d is not None
    pki = world.pki
    out = run_edged("publish", str(compiled(world.tmp / "compiled-cert")), "--to",
                    world.publish_dir(CERT_MODEL), "--sign", str(pki.key("leaf")),
                    "--sign-cert", str(pki.crt("leaf")), "--cert-chain",
                    str(pki.crt("intermediate")), "--model", CERT_MODEL, "--version", "v2")
    assert out.returncode == 0, out.stderr
    assert "signed with the certificate" in out.stdout, out.stdout
    r = world.pull(CERT_MODEL)
    assert r["status"] == "OK" and r["delivery"]["version"] == "v2", r
    assert world.serving(CERT_MODEL) == "cnn-fp32@v2"
    assert "signed by CN=edged test leaf, issued by CN=edged test intermediate" in \
        world.d.log()


def test_a_certificate_the_device_does_not_trust_is_refused_with_the_reason(
        world: World) -> None:
    # a leaf of another CA: its chain does not lead to the configured root
    world.publish(CERT_MODEL, "v3-stranger", compiled(world.tmp / "c-cert-stranger"),
                  cert=("stranger_leaf", "stranger"))
    refused(world.pull(CERT_MODEL, "v3-stranger"), "verifying", "certificate",
            "does not chain to a root in certificate_chain")
    # a leaf of the right CA that may not sign (no KeyUsage, no ExtendedKeyUsage)
    world.publish(CERT_MODEL, "v3-no-usage", compiled(world.tmp / "c-cert-usage"),
                  cert=("no_usage", "intermediate"))
    refused(world.pull(CERT_MODEL, "v3-no-usage"), "verifying", "certificate",
            "allows neither digital signatures")
    # a bare key where a certificate is expected, and a certificate where a key is
    world.publish(CERT_MODEL, "v3-key", compiled(world.tmp / "c-cert-key"))
    refused(world.pull(CERT_MODEL, "v3-key"), "verifying", "certificate", "bare key")
    world.publish("digits", "v3-cert", compiled(world.tmp / "c-key-cert"),
                  cert=("leaf", "intermediate"))
    refused(world.pull("digits", "v3-cert"), "verifying", "certificate",
            "CN=edged test leaf")
    assert world.serving(CERT_MODEL) == "cnn-fp32@v2"
    assert world.serving("digits") == "cnn-fp32@v2"


def test_publish_and_the_config_say_what_is_wrong_with_a_certificate(tmp_path: Path) -> None:
    from edged.config.file import parse_config
    from edged.errors import ConfigError

    pki = Pki(tmp_path)
    key, _ = keypair(tmp_path)
    src = compiled(tmp_path / "c")
    base = ["publish", str(src), "--to", str(tmp_path / "repo"), "--model", "digits",
            "--version", "v2"]
    out = run_edged(*base, "--sign", str(key), "--sign-cert", str(pki.crt("leaf")),
                    "--cert-chain", str(pki.crt("intermediate")))
    assert out.returncode == 1 and "does not match" in out.stderr, out.stderr
    out = run_edged(*base, "--sign", str(pki.key("leaf")), "--sign-cert",
                    str(pki.crt("leaf")))
    assert out.returncode == 1 and "--cert-chain" in out.stderr, out.stderr
    out = run_edged(*base, "--sign-cert", str(pki.crt("leaf")), "--unsigned")
    assert out.returncode == 2 and "--sign KEY" in out.stderr, out.stderr
    model = {"name": "m", "variants": [{"name": "v", "backend": "onnxruntime",
                                        "path": str(MODELS / "cnn-fp32.onnx")}]}
    for trust, words in (({"certificate_chain": [str(key)]},
                          "certificate_chain[0]: " + str(key) + ": not PEM certificates"),
                         ({"public_key": str(pki.crt("root"))}, "not a PEM public key"),
                         ({"public_key": str(tmp_path / "publisher.pub"),
                           "certificate_chain": [str(pki.crt("root"))]},
                          "give public_key or certificate_chain, not both")):
        bad = {**model, "source": {"url": f"file://{tmp_path}", **trust}}
        with pytest.raises(ConfigError) as e:
            parse_config({"models": [bad]}, tmp_path / "c.toml")
        assert words in str(e.value), (words, str(e.value))


def test_status_and_metrics_say_which_version_serves_and_why_others_were_refused(
        world: World) -> None:
    assert world.d is not None
    s = world.d.ctl({"op": "status"})
    e = s["delivery"]["digits"]
    assert e["version"] == "v2" and e["source"].startswith("file://")
    assert e["last_refusal"]["reason"] and any(h["event"] == "refused" for h in e["history"])
    from edged.cli.status_text import format_status

    text = format_status(s)
    assert "delivery digits: v2 (" in text and "last refusal (" in text, text
    import urllib.request

    text = urllib.request.urlopen(
        f"http://127.0.0.1:{world.d.metrics_port}/metrics").read().decode()
    assert 'edged_model_version_info{digest="' in text and 'model="digits",version="v2"' \
        in text
    assert 'edged_model_updates_total{model="digits",outcome="refused",reason="accuracy"}' \
        in text


def test_a_restart_serves_the_promoted_version_without_a_pull(world: World) -> None:
    assert world.d is not None
    world.d.stop()
    world.d = Daemon(world.d.config, world.tmp, metrics=True)
    assert world.serving("digits") == "cnn-fp32@v2"
    assert world.serving("digits_http") == "small-fp32@v3"
    assert world.d.ctl({"op": "status"})["delivery"]["digits_oci"]["version"] == "v2"


def test_under_load_promotions_fail_no_request_and_replies_name_each_new_version(
        world: World) -> None:
    """8 clients send while four new versions are pulled, gated, shadowed and promoted one
    after the other: four send the model's input tensor (prepared on the event loop), four
    send camera frames (1120x1120, decoded and resized on the daemon's decode threads), so
    at each switch frames admitted by the version going out are still being decoded.
    Every reply is OK, and after each promotion replies name the new version.

    (Before a replaced model waited for what it had admitted, a frame decoded across the
    switch was answered UNAVAILABLE, the model it was admitted to being shut down or
    unloaded: in one run of this test out of two here. A watch window rolling one of these
    versions back is one more switch, and fails nothing either.)"""
    assert world.d is not None
    versions = [("v4", "small-fp32", 0.9867), ("v5", "cnn-fp32", 0.9978),
                ("v6", "small-fp32", 0.9867), ("v7", "cnn-fp32", 0.9978)]
    for version, top, accuracy in versions:
        world.publish("digits", version, compiled(world.tmp / f"c-{version}", top=top),
                      accuracy=accuracy)
    stop = threading.Event()
    replies: list[tuple[str, str | None, str | None]] = []

    def send(frames: bool) -> None:
        assert world.d is not None
        with world.d.client(timeout_s=30) as c:
            i = 0
            while not stop.is_set():
                x = np.kron(X[i % len(X)], np.ones((40, 40), np.uint8)) if frames else \
                    tensor(i % len(X))
                r = c.infer("digits", x, raise_on_error=False)
                replies.append((r.status, r.header.get("variant"), r.header.get("error")))
                i += 1

    threads = [threading.Thread(target=send, args=(k % 2 == 1,)) for k in range(8)]
    for t in threads:
        t.start()
    try:
        for version, top, _ in versions:
            r = world.pull("digits", version)
            assert r["status"] == "OK", r
            assert "shadow" in r["delivery"], r  # shadowed under that load, then promoted
            seen = len(replies)
            end = time.monotonic() + 30
            while not any(v == f"{top}@{version}" for _, v, _ in replies[seen:]):
                assert time.monotonic() < end, f"no reply named {top}@{version}"
                time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    failed = [r for r in replies if r[0] != "OK"]
    assert not failed, json.dumps(failed[:5])
    assert {f"{top}@{v}" for v, top, _ in versions} <= {v for _, v, _ in replies}
