#!/usr/bin/env python3
"""Model delivery's "Measured" figures (issue 30, docs/delivery.md), on a real OCI registry.

    PYTHONPATH=. python scripts/bench/bench_delivery.py --clients 8 --seconds 10 --json
    PYTHONPATH=. python scripts/bench/bench_delivery.py --model digits-det --clients 8

Starts Debian's ``docker-registry`` on loopback and a daemon serving the shipped digits
model with ``[models.source]`` on it, ``--clients`` native clients sending as fast as they
are answered throughout, then per round:

1. ``edged publish`` of a new version (signed with a key pair made here) and ``edged ctl
   pull``: the time from the start of ``edged publish`` to the first reply computed by the
   new version (its variants are named ``VARIANT@VERSION``), and the daemon's CPU seconds
   spent in each stage (``edged status``'s stage, sampled every 20 ms, against the
   daemon's CPU time; serving the clients counts in every stage alike, so the load-free
   cost of a stage is its figure minus the same time's serving CPU in ``steady``);
2. live p99 while the candidate shadows (``shadow_s`` = ``--seconds``, a share of 0.2) and
   in the watch window, against the steady p99 before the pull (the shadow's cost to live
   p99; the goal: within noise);
3. ``edged ctl rollback``: the previous version serves again;
4. replies that were not OK across the promotion and the rollback (the goal: 0).

``--model digits-det`` measures the trained digits detector (its bundle's gate is mAP@0.5 on
its labelled scenes); ``--model person`` the shipped person detector, its gate run on a
two-photo set made here (``person_set``: the photo in ``models/person/samples`` and
matplotlib's ``grace_hopper.jpg``, one hand-read box each), its clients sending those photos.
``--clients 2 --seconds 1`` checks that the script runs; the figures that count come from a
quiet machine (the script prints the load average and warns above 0.3).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from edged.testing.delivery import keypair, registry  # noqa: E402
from edged.testing.harness import (  # noqa: E402
    Daemon,
    machine_info,
    percentiles_ms,
    say_machine,
)

MODELS = ROOT / "models" / "digits"
DET = ROOT / "models" / "digits-det"
PERSON = ROOT / "models" / "person"
CLAIM = {"cnn-fp32": 0.9978, "small-fp32": 0.9867, "det-fp32": 0.9177, "det-int8": 0.9159,
         "ssdlite-fp32": 1.0, "ssdlite-int8": 1.0}
#: per model: the two tops a round alternates between, and the model's table
TOPS = {"digits": ("cnn-fp32", "small-fp32"), "digits-det": ("det-fp32", "det-int8"),
        "person": ("ssdlite-fp32", "ssdlite-int8")}
#: the person in each photo of the person detector's two-photo set, x1, y1, x2, y2 in the
#: photo's pixels, read off the photo over a 50-pixel grid (tests/support/person.py)
PERSON_BOXES = {"astronaut": (20, 15, 365, 512), "grace_hopper": (12, 22, 512, 600)}
TABLES = {
    "digits": '[models.preprocess]\ncolor = "gray"\nwidth = 28\nheight = 28\n'
              'layout = "NCHW"\n',
    "digits-det": '[models.preprocess]\ncolor = "rgb"\nwidth = 160\nheight = 160\n'
                  'layout = "NCHW"\n[models.postprocess]\nkind = "detect"\n'
                  'decoder = "yolov8"\nresize = "letterbox"\nconf = 0.25\niou = 0.5\n',
    "person": '[models.preprocess]\ncolor = "rgb"\nwidth = 300\nheight = 300\nscale = 1.0\n'
              'layout = "NHWC"\ndtype = "uint8"\n[models.postprocess]\nkind = "detect"\n'
              'decoder = "ssd"\nresize = "stretch"\nlabel_offset = 1\nlabels = ["person"]\n'
              'conf = 0.5\nmax_det = 20\n'}


def person_set(path: Path) -> Path:
    """The person detector's labelled set: the photo that ships in ``models/person/samples``
    and matplotlib's ``grace_hopper.jpg`` where matplotlib is installed, each resized to
    512x512 (the ``.npz`` form needs one size), one person box each. Two photos: enough for
    the gate to run as it would on a device, not a measure of the detector's accuracy."""
    import cv2

    photos = {"astronaut": cv2.imread(str(PERSON / "samples" / "astronaut.jpg"))}
    try:
        from matplotlib import cbook

        photos["grace_hopper"] = cv2.imread(cbook.get_sample_data("grace_hopper.jpg",
                                                                  asfileobj=False))
    except ImportError:
        pass
    images, boxes = [], []
    for i, (name, img) in enumerate(photos.items()):
        h, w = img.shape[:2]
        x1, y1, x2, y2 = PERSON_BOXES[name]
        images.append(cv2.resize(img, (512, 512), interpolation=cv2.INTER_AREA))
        sx, sy = 512 / w, 512 / h
        boxes.append([i, x1 * sx, y1 * sy, x2 * sx, y2 * sy, 0])
    np.savez(path, images=np.stack(images), boxes=np.array(boxes, np.float64))
    return path


def compiled_det(folder: Path, top: str, source: Path) -> Path:
    """What ``edged compile`` writes for a detector of ``source``, ``top`` alone on the
    ladder."""
    folder.mkdir(parents=True)
    for suffix in (".onnx", ".onnx.golden.npz"):
        shutil.copy(source / f"{top}{suffix}", folder / f"{top}{suffix}")
    (folder / "variants.toml").write_text(f'[[models.variants]]\nname = "{top}"\n'
                                          f'backend = "onnxruntime"\npath = "{top}.onnx"\n')
    shutil.copy(source / "model.json", folder / "model.json")
    return folder


def compiled(folder: Path, top: str) -> Path:
    """What ``edged compile`` writes for the digits model, with ``top`` on the ladder."""
    if top.startswith("det"):
        return compiled_det(folder, top, DET)
    if top.startswith("ssdlite"):
        return compiled_det(folder, top, PERSON)
    folder.mkdir(parents=True)
    ladder = [top] + (["cnn-int8"] if top == "cnn-fp32" else [])
    lines = []
    for name in ladder:
        for suffix in (".onnx", ".onnx.golden.npz"):
            shutil.copy(MODELS / f"{name}{suffix}", folder / f"{name}{suffix}")
        lines += ["[[models.variants]]", f'name = "{name}"', 'backend = "onnxruntime"',
                  f'path = "{name}.onnx"', ""]
    (folder / "variants.toml").write_text("\n".join(lines))
    shutil.copy(MODELS / "model.json", folder / "model.json")
    shutil.copy(MODELS / "validation.npz", folder / "validation.npz")
    return folder


def config(tmp: Path, oci: str, pub: Path, watch_s: float, model: str) -> Path:
    top = TOPS[model][0]
    path = {"digits-det": DET, "person": PERSON}.get(model, MODELS) / f"{top}.onnx"
    p = tmp / "bench_delivery.toml"
    p.write_text(f"""[server]
drain_timeout_s = 2.0
state_dir = "{tmp / 'state'}"
[metrics]
listen = "off"
[[models]]
name = "{model}"
max_batch_size = 8
[models.source]
url = "oci://{oci}/edged/{model}:stable"
public_key = "{pub}"
poll_s = 0
insecure = true
[models.rollout]
watch_s = {watch_s}
shadow_s = {watch_s}
shadow_requests = 1000000
shadow_share = 0.2
build_rungs = false
{TABLES[model]}[[models.variants]]
name = "{top}"
backend = "onnxruntime"
path = "{path}"
""")
    return p


class Clients:
    """``n`` native clients, each sending the next validation image when answered."""

    def __init__(self, d: Daemon, n: int, model: str, validation: Path | None) -> None:
        if model == "person":
            import cv2

            assert validation is not None
            with np.load(validation) as z:
                self.x = np.stack([cv2.cvtColor(cv2.resize(im, (300, 300)), cv2.COLOR_BGR2RGB)
                                   for im in z["images"]])[:, None]
        elif model == "digits-det":
            with np.load(DET / "val.npz") as z:
                self.x = (z["images"][:16].astype(np.float32) / 255.0).transpose(
                    0, 3, 1, 2)[:, None]
        else:
            with np.load(MODELS / "validation.npz") as z:
                self.x = (z["x"][:64].astype(np.float32) / 255.0)[:, None, None]
        self.model = model
        self.d, self.stop = d, threading.Event()
        self.log: list[tuple[float, float, str, str | None]] = []  # t, seconds, status, variant
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, k: int) -> None:
        with self.d.client(timeout_s=30) as c:
            i = k
            while not self.stop.is_set():
                t0 = time.monotonic()
                r = c.infer(self.model, self.x[i % len(self.x)], raise_on_error=False)
                self.log.append((t0, time.monotonic() - t0, r.status, r.header.get("variant")))
                i += 1

    def between(self, a: float, b: float) -> list[tuple[float, float, str, str | None]]:
        return [e for e in list(self.log) if a <= e[0] < b]

    def first(self, suffix: str, after: float) -> float | None:
        return next((t + s for t, s, _, v in list(self.log)
                     if t >= after and v and v.endswith(suffix)), None)

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def publish(src: Path, oci: str, key: Path, model: str, version: str, validation: Path | None,
            accuracy: float) -> float:
    t0 = time.monotonic()
    extra = ["--validation", str(validation)] if validation is not None else []
    out = subprocess.run([sys.executable, "-m", "edged", "publish", str(src), "--to",
                          f"oci://{oci}/edged/{model}:stable", "--sign", str(key), "--model",
                          model, "--version", version, "--accuracy", str(accuracy),
                          "--insecure", *extra], capture_output=True, text=True,
                         cwd=str(ROOT))
    if out.returncode:
        raise SystemExit(f"edged publish failed: {out.stderr}")
    return time.monotonic() - t0


def pull_with_stages(d: Daemon, model: str, version: str, spans: dict[str, list[float]]
                     ) -> tuple[dict[str, Any], dict[str, float]]:
    """``edged ctl pull`` while sampling the stage and the daemon's CPU every 20 ms;
    ``spans`` gets each stage's first and last sample time."""
    proc = psutil.Process(d.pid)
    result: dict[str, Any] = {}

    def pull() -> None:
        result.update(d.ctl({"op": "pull", "model": model, "version": version},
                            timeout=300))

    t = threading.Thread(target=pull)
    cpu: dict[str, float] = {}
    last_cpu = sum(proc.cpu_times()[:2])
    t.start()
    while t.is_alive():
        stage = d.ctl({"op": "status"})["delivery"].get(model, {}).get("stage", "?")
        now = sum(proc.cpu_times()[:2])
        cpu[stage] = cpu.get(stage, 0.0) + now - last_cpu
        last_cpu = now
        t_now = time.monotonic()
        spans.setdefault(stage, [t_now, t_now])[1] = t_now
        time.sleep(0.02)
    t.join()
    return result, {k: round(v, 3) for k, v in cpu.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0, help="steady and watch windows")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", choices=tuple(TOPS), default="digits",
                    help="digits (a classifier), digits-det (the trained detector) or person "
                         "(the shipped person detector, gated on a two-photo set)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    info = machine_info()
    say_machine(info)
    report: dict[str, Any] = {"machine": info, "clients": args.clients, "model": args.model,
                              "rounds": []}
    with tempfile.TemporaryDirectory(prefix="bench-delivery-") as tmp_s:
        tmp = Path(tmp_s)
        # the labelled set a detector's bundle carries (a classifier's ships in its folder)
        validation = (DET / "val.npz" if args.model == "digits-det" else
                      person_set(tmp / "person-val.npz") if args.model == "person" else None)
        key, pub = keypair(tmp)
        with registry(tmp) as oci:
            model = args.model
            d = Daemon(config(tmp, oci, pub, args.seconds, model), tmp)
            clients = Clients(d, args.clients, model, validation)
            try:
                for k in range(args.rounds):
                    top = TOPS[model][1] if k % 2 else TOPS[model][0]
                    version = f"r{k + 1}"
                    src = compiled(tmp / f"c{k}", top)
                    time.sleep(args.seconds)
                    t_steady = time.monotonic()
                    steady = clients.between(t_steady - args.seconds, t_steady)
                    t0 = time.monotonic()
                    publish_s = publish(src, oci, key, model, version, validation, CLAIM[top])
                    spans: dict[str, list[float]] = {}
                    r, cpu = pull_with_stages(d, model, version, spans)
                    shadowed = clients.between(*spans.get("shadowing", [0.0, 0.0]))
                    if r.get("status") != "OK":
                        raise SystemExit("pull refused: " + json.dumps(
                            r.get("delivery", {}).get("last_refusal") or r)[:800])
                    t_watch = time.monotonic()
                    time.sleep(args.seconds)
                    watched = clients.between(t_watch, time.monotonic())
                    # after the watch: a reply is logged when it arrives, and the first the
                    # new version computed may still be in flight when the pull returns
                    first = clients.first(f"@{version}", t0)
                    t_rb = time.monotonic()
                    rb = d.ctl({"op": "rollback", "model": model}, timeout=120)
                    time.sleep(0.5)
                    across = clients.between(t0, time.monotonic())
                    row = {
                        "version": version, "top": top, "publish_s": round(publish_s, 3),
                        "publish_to_first_reply_s": None if first is None else
                        round(first - t0, 3),
                        "cpu_s_by_stage": cpu,
                        "steady": {**percentiles_ms([e[1] for e in steady]),
                                   "replies": len(steady)},
                        "watch": {**percentiles_ms([e[1] for e in watched]),
                                  "replies": len(watched)},
                        "shadow": {**percentiles_ms([e[1] for e in shadowed]),
                                   "replies": len(shadowed),
                                   "report": r.get("delivery", {}).get("shadow")},
                        "rollback_ok": rb.get("status") == "OK",
                        "rollback_s": round(time.monotonic() - t_rb - 0.5, 3),
                        "replies_across_promotion_and_rollback": len(across),
                        "failed_across_promotion_and_rollback":
                            sum(1 for e in across if e[2] != "OK"),
                    }
                    report["rounds"].append(row)
                    print(f"{version} ({top}): publish {row['publish_s']} s, publish -> first "
                          f"reply {row['publish_to_first_reply_s']} s; CPU by stage {cpu}; "
                          f"p99 steady {row['steady']['p99_ms']:.1f} ms, while shadowing "
                          f"{row['shadow']['p99_ms']:.1f} ms, in the watch "
                          f"{row['watch']['p99_ms']:.1f} ms; failed "
                          f"{row['failed_across_promotion_and_rollback']} of "
                          f"{len(across)} across the promotion and the rollback")
            finally:
                clients.end()
                d.stop()
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
