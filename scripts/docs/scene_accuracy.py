#!/usr/bin/env python3
"""The shipped pipeline on photographs no model was made from, written into docs/pipelines.md.

    PYTHONPATH=. .venv/bin/python scripts/docs/scene_accuracy.py          # rewrite the docs
    PYTHONPATH=. .venv/bin/python scripts/docs/scene_accuracy.py --check  # print only

Why a script: the figures must be what the committed models and config do through the
daemon, and be measured again whenever a model, the crop code or the detector's decoding
changes (re-run it after any of them). It starts the daemon on
``examples/pipelines/digits-reader.toml`` (the harness, real sockets), sends every frame
of ``models/scenes-eval`` (``scripts/models/make_scene_eval.py``) to the pipeline as the
JPEG it is, and scores the replies with ``edged.testing.scene_eval`` (the measure
``tests/test_scene_eval.py`` holds it to):

1. the pipeline as shipped (its detector's own threshold): accuracy of the matched boxes
   (the stage's label), recall, precision, false boxes per digit-free frame;
2. the same pipeline asked at a lower threshold and scored at several: how the
   detector's score threshold trades recall for false boxes (how the shipped one was
   picked);
3. both again with one suppression per class (``agnostic = false``, a copy of the
   detector beside the shipped one, which suppresses overlapping boxes across classes),
   to separate what duplicate boxes of one digit cost from what the detector misses or
   invents.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import doc_section

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "pipelines" / "digits-reader.toml"
DOC = ROOT / "docs" / "pipelines.md"
BEGIN = "<!-- scene-accuracy:begin (scripts/docs/scene_accuracy.py writes this part) -->"
END = "<!-- scene-accuracy:end -->"
PIPELINE, STAGE = "digits-reader", "digit"
PER_CLASS = "digits-reader-per-class"
SWEEP = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
#: digit-free frames the set had first (its card): the false boxes on them and on the ones
#: added later are shown apart, so a figure measured before compares with one after
FIRST_EMPTY = 30


def config_text() -> str:
    """The example with absolute paths, plus a copy of its detector and pipeline that
    suppresses overlapping boxes per class (the example's is across classes)."""
    text = CONFIG.read_text().replace('path = "../../models/', f'path = "{ROOT}/models/')
    blocks = re.split(r"(?m)^(?=\[\[models\]\]\n)", text)
    det = next(b for b in blocks if re.search(r'(?m)^name = "digits-det"$', b))
    pipe = next(b for b in blocks if re.search(rf'(?m)^name = "{PIPELINE}"$', b))
    assert re.search(r"(?m)^agnostic = true", det), "the example suppresses across classes"
    det2 = det.replace('name = "digits-det"', 'name = "digits-det-per-class"').replace(
        "agnostic = true", "agnostic = false")
    pipe2 = pipe.replace(f'name = "{PIPELINE}"', f'name = "{PER_CLASS}"').replace(
        'detector = "digits-det"', 'detector = "digits-det-per-class"')
    return text + "\n" + det2 + "\n" + pipe2


def measure() -> dict[str, object]:
    from edged.config.file import load_config
    from edged.testing import scene_eval
    from edged.testing.harness import Daemon

    frames, truth = scene_eval.load()
    conf = load_config(CONFIG).models[0].postprocess.conf  # type: ignore[union-attr]
    low = min(SWEEP[0], conf)
    out: dict[str, object] = {"conf": conf, "frames": frames, "truth": truth}
    with tempfile.TemporaryDirectory(prefix="edged-scene-acc-") as tmp:
        path = Path(tmp) / "edged.toml"
        path.write_text(config_text())
        d = Daemon(path, Path(tmp))
        try:
            for name in (PIPELINE, PER_CLASS):
                out[name] = scene_eval.ask(d, name, frames)
                out[name + "@low"] = scene_eval.ask(d, name, frames, conf=low)
        finally:
            d.stop()
    return out


def row(label: str, s: object) -> str:
    pct = lambda v: f"{100 * v:.1f}"  # noqa: E731
    return (f"| {label} | {pct(s.accuracy)} ({s.right}/{s.matched}) | "  # type: ignore[attr-defined]
            f"{pct(s.recall)} | {pct(s.precision)} | {s.false_per_empty:.2f} |")  # type: ignore[attr-defined]


def section(r: dict[str, object]) -> str:
    from edged.testing.scene_eval import score

    truth = r["truth"]
    shipped = {n: score(r[n], truth, STAGE) for n in (PIPELINE, PER_CLASS)}  # type: ignore[arg-type]
    s = shipped[PIPELINE]
    with_digits = s.frames - s.empty_frames
    head = ("| what | matched boxes with the right digit % | recall % | boxes that match a "
            "digit % | false boxes per digit-free frame |\n|---|---|---|---|---|")
    main = "\n".join([row(f"**`{PIPELINE}` as shipped** (conf {r['conf']:g})", s),
                      row("the same, one suppression per class (`agnostic = false`)",
                          shipped[PER_CLASS])])
    dets, truth_ = r[PIPELINE], truth  # type: ignore[assignment]
    empty = [i for i, t in enumerate(truth_) if not len(t)]  # type: ignore[arg-type]
    first, added = empty[:FIRST_EMPTY], empty[FIRST_EMPTY:]
    a_first = sum(len(dets[i]) for i in first)  # type: ignore[index]
    a_added = sum(len(dets[i]) for i in added)  # type: ignore[index]
    sweep = []
    for t in SWEEP:
        a = score(r[PIPELINE + "@low"], truth, STAGE, min_score=t)  # type: ignore[arg-type]
        b = score(r[PER_CLASS + "@low"], truth, STAGE, min_score=t)  # type: ignore[arg-type]
        sweep.append(f"| {t:g} | {100 * a.recall:.1f} | {100 * a.precision:.1f} | "
                     f"{a.false_per_empty:.2f} | {100 * b.precision:.1f} | "
                     f"{b.false_per_empty:.2f} |")
    return f"""{BEGIN}

Measured by `scripts/docs/scene_accuracy.py` through the daemon on
`examples/pipelines/digits-reader.toml`, on `models/scenes-eval`: {s.frames} camera
frames (640x480 JPEG) cut from photographs that no model of the project was trained on,
{with_digits} of them with {s.digits} held-out digits on signs (64-176 px), {s.empty_frames}
with no digit at all (the set's card: `models/scenes-eval/README.md`). A returned box
matches a digit at IoU >= 0.5, one box per digit, the best-scored first: a second box on
the same digit is a false box.

{head}
{main}

False boxes as shipped: {a_first} on the {len(first)} digit-free frames the set first had
({a_first / max(len(first), 1):.2f} a frame), {a_added} on the {len(added)} added since
({a_added / max(len(added), 1):.2f} a frame).

The detector's score threshold (boxes under it are not returned): the pipeline asked at
{min(SWEEP[0], float(r['conf'])):g} and its boxes counted from each threshold up (the last
two columns with one suppression per class):

| threshold | recall % | boxes that match a digit % | false boxes per digit-free frame \
| per class: match % | per class: false per digit-free frame |
|---|---|---|---|---|---|
{chr(10).join(sweep)}

{END}"""


def main(argv: list[str] | None = None) -> int:
    return doc_section.main(DOC, BEGIN, END, lambda: section(measure()),
                            __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
