"""``[[models]]`` and ``[[models.variants]]``: a model, its batching keys and its ladder.

Why the variants' options are read here, by runtime name: ``edged check`` reports a bad
option of any runtime in one pass, without importing that runtime
(``edged.config.runtimes`` holds each runtime's options).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edged.config.overload import OverloadConfig
from edged.config.postprocess import PostprocessConfig
from edged.config.preprocess import PreprocessConfig
from edged.config.rollout import RolloutConfig, read_rollout
from edged.config.runtimes import RUNTIMES, BackendOptions, read_options
from edged.config.schema import Table, non_negative, positive
from edged.config.source import SourceConfig, read_source
from edged.config.verify import BY_PRECISION, ModelVerify, VariantVerify


@dataclass(frozen=True)
class VariantConfig:
    name: str
    backend: str
    path: Path
    options: BackendOptions
    #: the variant others are checked against on this device (default: the first)
    reference: bool = False
    verify: VariantVerify = field(default_factory=VariantVerify)
    #: fp32 / fp16 / int8 (default: the artifact's sidecar, else its name)
    precision: str | None = None
    #: the rung's other member, of equal quality: it computes every batch of more than one
    #: row, this variant the lone rows (``edged compile`` pairs two variants when one is
    #: faster at batch 1 and the other at the max batch); None: this variant computes all
    batch_variant: VariantConfig | None = None


@dataclass(frozen=True)
class ModelConfig:
    name: str
    variants: tuple[VariantConfig, ...]  # heaviest first: the governor's ladder
    required: bool = False
    max_batch_size: int = 8
    max_queue: int = 256
    max_delay_ms: float = 0.0
    auto_batch: bool = False
    #: after a batch, hold a short queue for this fraction of a batch's compute time (0: off)
    batch_window: float = 0.0
    #: a lone request on an idle model computes on the event loop below this (0: off)
    #: the express lane's bound (docs/architecture.md, "The hot path"): 0 turns it off
    inline_max_ms: float = 2.0
    preprocess: PreprocessConfig | None = None
    postprocess: PostprocessConfig | None = None  # a detector: answer with boxes
    #: frames per second one stream may send (0: no limit); a request's max_fps may lower it
    max_stream_fps: float = 0.0
    #: stream ids remembered at most (least recently seen forgotten first)
    max_streams: int = 4096
    #: a stream not seen for this long is forgotten
    stream_idle_s: float = 60.0
    verify: ModelVerify = field(default_factory=ModelVerify)
    #: stepping down the ladder while requests come too close to their deadlines
    overload: OverloadConfig = field(default_factory=OverloadConfig)
    #: where new versions come from (docs/delivery.md); the variants are then the
    #: version's own (its ladder), or the configured ones until a first version arrives
    source: SourceConfig | None = None
    #: how a delivered version is shadowed and watched into service
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


def overridden(m: ModelConfig) -> list[str]:
    """Keys of ``m`` set but silently outweighed by another key: what ``edged check`` warns
    of, naming both (the config is valid; the reader's intent may not be what serves)."""
    out = []
    if m.max_delay_ms > 0 and m.batch_window > 0:
        out.append(f"model {m.name!r}: max_delay_ms = {m.max_delay_ms:g} wins over "
                   f"batch_window = {m.batch_window:g}, which is ignored (set one of them; "
                   "docs/configuration.md)")
    return out


def _variant(t: Table, member: bool = False) -> VariantConfig | None:
    """One ``[[models.variants]]`` table, or (``member``) a rung's ``batch_variant``."""
    name = t.get("name", str)
    backend = t.get("backend", str, choices=tuple(RUNTIMES))
    path = t.get_path("path")  # existence is checked at load: one bad file fails one model
    opts_t = t.table("options")
    reference = t.get("reference", bool, False)
    verify = VariantVerify.from_value(t)
    precision = t.get("precision", str, None, choices=tuple(BY_PRECISION))
    options = read_options(backend, opts_t) if backend is not None else None
    batch = _batch_variant(t, member)
    if member and reference:
        t.problem("reference", "a batch_variant cannot be the reference: its rung's variant "
                  "is the one others are checked against")
    t.done()
    if name is None or backend is None or path is None or options is None:
        return None
    return VariantConfig(name=name, backend=backend, path=path, options=options,
                         reference=reference, verify=verify, precision=precision,
                         batch_variant=batch)


def _batch_variant(t: Table, member: bool) -> VariantConfig | None:
    """``[models.variants.batch_variant]``: the rung's member for batches of > 1 row."""
    if not t.has("batch_variant"):
        return None
    bt = t.table("batch_variant")  # not a table: said, and read as none
    if not isinstance(t.data["batch_variant"], dict):
        return None
    if member:
        t.problem("batch_variant", "a batch_variant cannot have a batch_variant of its own "
                  "(a rung is one variant, or a pair)")
        return None
    return _variant(bt, member=True)


def members(v: VariantConfig) -> tuple[VariantConfig, ...]:
    """The variants of one rung: ``v``, and its ``batch_variant`` when it has one."""
    return (v,) if v.batch_variant is None else (v, v.batch_variant)


def read_model(t: Table) -> ModelConfig | None:
    # kind = "pipeline" entries are read by edged.config.pipelines; any other kind is a typo
    t.get("kind", str, "model", choices=("model", "pipeline"))
    name = t.get("name", str, check=lambda n: None if n.strip() else "must not be empty")
    source = read_source(t.table("source"))
    variants = [v for v in (_variant(vt) for vt in t.tables(
        "variants", required=source is None)) if v]
    seen: set[str] = set()
    for v in (m for rung in variants for m in members(rung)):
        if v.name in seen:
            t.problem("variants", f"variant name {v.name!r} is used twice")
        seen.add(v.name)
    refs = [v.name for v in variants if v.reference]
    if len(refs) > 1:
        t.problem("variants", f"only one variant may be the reference; {', '.join(refs)} say "
                  "reference = true")
    verify_t = t.table("verify")
    verify = ModelVerify.from_table(verify_t)
    pre_t = t.table("preprocess")
    pre = PreprocessConfig.from_table(pre_t) if pre_t.data else None
    post_t = t.table("postprocess")
    post = PostprocessConfig.from_table(post_t) if post_t.data else None
    if post_t.data and not pre_t.data:
        t.problem("postprocess", "a detector needs [models.preprocess] (its width and height "
                  "are what frames are letterboxed or stretched to)")
    batching = t.table("batching")  # batching keys may sit in [models.batching] or inline
    src = batching if batching.data else t
    cfg = ModelConfig(
        name=name or "",
        variants=tuple(variants),
        required=t.get("required", bool, False),
        max_batch_size=src.get("max_batch_size", int, 8, check=positive),
        max_queue=src.get("max_queue", int, 256, check=positive),
        max_delay_ms=src.get("max_delay_ms", float, 0.0, check=non_negative),
        auto_batch=src.get("auto_batch", bool, False),
        batch_window=src.get("batch_window", float, 0.0, check=_fraction),
        inline_max_ms=src.get("inline_max_ms", float, 2.0, check=non_negative),
        preprocess=pre,
        postprocess=post,
        max_stream_fps=t.get("max_stream_fps", float, 0.0, check=non_negative),
        max_streams=t.get("max_streams", int, 4096, check=positive),
        stream_idle_s=t.get("stream_idle_s", float, 60.0, check=positive),
        verify=verify,
        overload=OverloadConfig.from_table(t.table("overload")),
        source=source,
        rollout=read_rollout(t.table("rollout")),
    )
    if batching.data:
        batching.done()
    t.done()
    return cfg if name and (variants or source) else None


def _fraction(v: float) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be a fraction from 0 to 1 (of a batch's compute time)"


