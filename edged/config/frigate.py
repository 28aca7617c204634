"""``[[server.frigate]]``: endpoints speaking Frigate's ``zmq`` detector protocol.

Why a module of its own: the table has two modes (a configured detector, or the model
Frigate sends) whose keys depend on each other, and its cross-checks against the
models (a configured one must be a detector) run after the models are read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from edged.config.layouts import FRIGATE_TYPES, normalize_type
from edged.config.schema import Table, positive, zmq_endpoint

if TYPE_CHECKING:
    from edged.config.models import ModelConfig


@dataclass(frozen=True)
class FrigateConfig:
    """One ``[[server.frigate]]`` endpoint speaking Frigate's ``zmq`` detector protocol
    for one detection model (docs/frigate.md)."""

    endpoint: str
    model: str
    #: rows below this score are left out of the reply (None: the model's ``conf``)
    min_score: float | None = None
    #: model class id -> Frigate labelmap id; ids not listed pass through unchanged
    class_map: tuple[tuple[int, int], ...] = ()
    #: colour order of the tensors Frigate sends (its model ``input_pixel_format``)
    input_pixel_format: str = "rgb"
    #: Frigate's ``request_timeout_ms``: a request older than this is never computed
    timeout_ms: float = 200.0
    #: queue priority of these requests (0 = most important; a governor level may shed
    #: requests above a priority)
    priority: int = 1
    #: serve the model Frigate sends (no configured ``model``); ``model`` is then the
    #: name the transferred model is served under, ``frigate@ENDPOINT``
    accept_models: bool = False
    #: a model file larger than this is refused with an answer
    max_model_bytes: int = 256 << 20
    #: the Frigate model_type a sent model must fit (None: whichever type its graph fits)
    model_type: str | None = None
    #: build an INT8 rung for a sent model in the background (edged.delivery.rungs)
    int8_rung: bool = True
    #: frames Frigate sent that the rung is calibrated (3/4) and checked (1/4) on
    int8_frames: int = 48
    #: new model files one client may send a minute (the same bytes again never count)
    transfers_per_minute: int = 4


def _class_map(t: Table) -> tuple[tuple[int, int], ...]:
    """``class_map = { 0 = 0, 2 = 7 }``: TOML keys are strings, so digits are checked here."""
    raw = t.get("class_map", dict, {})
    pairs: list[tuple[int, int]] = []
    for k, v in (raw or {}).items():
        if not k.isdigit():
            t.problem(f"class_map.{k}", "keys are the model's class ids (integers >= 0)")
        elif isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535:
            t.problem(f"class_map.{k}", f"must be a Frigate labelmap id (0..65535); got {v!r}")
        else:
            pairs.append((int(k), v))
    return tuple(sorted(pairs))


def read_frigate(t: Table) -> FrigateConfig | None:
    endpoint = t.get("endpoint", str, check=zmq_endpoint)
    accept = t.get("accept_models", bool, False)
    model = t.get("model", str, None)
    if accept and model is not None:
        t.problem("model", "give either model (a configured detector) or accept_models = "
                  "true (the model Frigate sends), not both")
    elif not accept and model is None:
        t.problem("model", "missing: name a configured detection model, or set "
                  "accept_models = true to serve the model Frigate sends")
    if accept and endpoint:
        model = f"frigate@{endpoint}"
    model_type = t.get("model_type", str, None,
                       check=lambda v: None if normalize_type(v) else
                       f"must be one of Frigate's model types: {', '.join(FRIGATE_TYPES)} "
                       "(or yolo-generic)")
    if model_type is not None and not accept:
        t.problem("model_type", "applies with accept_models = true only (a configured model "
                  "decodes as its [models.postprocess] says)")
    min_score = t.get("min_score", float, None,
                      check=lambda v: None if 0.0 <= v <= 1.0 else "must be between 0 and 1")
    cfg = FrigateConfig(
        endpoint=endpoint or "", model=model or "", min_score=min_score,
        class_map=_class_map(t),
        input_pixel_format=t.get("input_pixel_format", str, "rgb", choices=("rgb", "bgr")),
        timeout_ms=t.get("timeout_ms", float, 200.0, check=positive),
        priority=t.get("priority", int, 1,
                       check=lambda v: None if 0 <= v <= 1000 else "must be 0..1000"),
        accept_models=bool(accept),
        max_model_bytes=t.get("max_model_bytes", int, 256 << 20, check=positive),
        model_type=normalize_type(model_type) if model_type else None,
        int8_rung=t.get("int8_rung", bool, True),
        int8_frames=t.get("int8_frames", int, 48,
                          check=lambda v: None if 4 <= v <= 1024 else "must be 4..1024"),
        transfers_per_minute=t.get("transfers_per_minute", int, 4,
                                   check=lambda v: None if 1 <= v <= 10000 else
                                   "must be 1..10000"),
    )
    t.done()
    return cfg if endpoint and model else None


def check_frigate(root: Table, frigate: tuple[FrigateConfig, ...], endpoints: tuple[str, ...],
                  models: list[ModelConfig]) -> None:
    """Each Frigate endpoint serves a configured detection model on an address of its own
    (not one of the native ``endpoints``)."""
    by_name = {m.name: m for m in models}
    seen = set(endpoints)
    for i, f in enumerate(frigate):
        key = f"server.frigate[{i}]"
        m = by_name.get(f.model)
        if f.accept_models:
            pass  # its model comes from Frigate
        elif m is None:
            root.problem(f"{key}.model", f"no model named {f.model!r}; models: "
                         f"{', '.join(by_name) or 'none'}")
        elif m.postprocess is None:
            root.problem(f"{key}.model", f"model {f.model!r} is not a detection model (Frigate "
                         "wants boxes: give it [models.postprocess] kind = \"detect\")")
        if f.endpoint in seen:
            root.problem(f"{key}.endpoint", f"{f.endpoint} is already bound by another endpoint")
        seen.add(f.endpoint)
