"""The registry: model name -> Model, and the loading, replacing and removing of models;
pipeline name -> Pipeline beside them.

Why a registry apart from the server: start, ``edged ctl load``/``unload`` and reload
all change which models are served; one object owns that map so requests always see
a consistent one (a replaced model keeps answering what it took before the switch).
Pipelines are kept apart from the models (iterating the registry gives models only: the
governor, the watchdog and the metrics act on models) and find their member models here
by name at each request, so a model replaced by a reload is the one they use next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from edged.config.models import ModelConfig
from edged.config.pipelines import PipelineConfig
from edged.config.server import ServerConfig
from edged.errors import NotFound
from edged.metrics import Metrics
from edged.model.model import Model
from edged.model.pipeline.pipeline import Pipeline
from edged.model.status import describe_model

#: what a client may name in a request: a model or a pipeline
Served = Model | Pipeline


class Registry:
    def __init__(self, metrics: Metrics, power_w: Callable[[], float | None]) -> None:
        self.metrics = metrics
        self.power_w = power_w
        self._models: dict[str, Model] = {}
        self._pipelines: dict[str, Pipeline] = {}

    def __iter__(self) -> Iterator[Model]:
        return iter(list(self._models.values()))

    def __len__(self) -> int:
        return len(self._models)

    def __contains__(self, name: str) -> bool:
        return name in self._models

    @property
    def names(self) -> list[str]:
        return list(self._models)

    def find(self, name: str) -> Model | None:
        return self._models.get(name)

    def get(self, name: str) -> Model:
        """The model, or NOT_FOUND naming what this daemon serves."""
        m = self._models.get(name)
        if m is None:
            if name in self._pipelines:
                raise NotFound(f"{name!r} is a pipeline, not a model; models: "
                               f"{', '.join(self.names) or 'none'}")
            raise unknown_model(name, self.names)
        return m

    # -- pipelines --------------------------------------------------------------------------

    @property
    def pipelines(self) -> list[Pipeline]:
        return list(self._pipelines.values())

    def served(self, name: str) -> Served:
        """What a request names: a model or a pipeline, or NOT_FOUND listing both."""
        s = self.find_served(name)
        if s is None:
            raise unknown_model(name, [*self.names, *self._pipelines])
        return s

    def find_served(self, name: str) -> Served | None:
        return self._models.get(name) or self._pipelines.get(name)

    def pipelines_of(self, model: str) -> list[Pipeline]:
        """The pipelines that run ``model`` (the governor routes its steps through them)."""
        return [p for p in self._pipelines.values() if model in p.cfg.models]

    def set_pipelines(self, pipelines: Sequence[PipelineConfig],
                      models: Sequence[ModelConfig]) -> None:
        """Serve ``pipelines`` from now on (at start, before the models load, so the
        governor's first choice of their members already follows them; on reload). A
        pipeline whose config and member ladders are unchanged is kept as it is, with
        its tracks' results and its step-down position."""
        by_name = {m.name: m for m in models}
        made = {}
        for pc in pipelines:
            det = by_name.get(pc.detector)
            ladders = {n: [v.name for v in by_name[n].variants] for n in pc.models
                       if n in by_name}
            old = self._pipelines.get(pc.name)
            if old is not None and old.cfg == pc and old.ladders == ladders:
                made[pc.name] = old
                continue
            made[pc.name] = Pipeline(pc, self.find, self.metrics, ladders,
                                     det.max_streams if det else 4096,
                                     det.stream_idle_s if det else 60.0)
        self._pipelines = made

    def create(self, mc: ModelConfig, server: ServerConfig) -> Model:
        """A new, not yet loaded model (not yet registered), bounded by ``server``'s
        limits and swap headroom."""
        return Model(mc, self.metrics, server.limits, self.power_w, server.swap_headroom_bytes)

    async def load(self, models: list[Model], index_for: Callable[[Model], int]) -> list[Model]:
        """Register and load ``models`` concurrently; returns those that failed.

        A failed model stays registered in state 'failed', so its requests get
        UNAVAILABLE with the reason rather than NOT_FOUND."""
        for m in models:
            self._models[m.name] = m
        results = await asyncio.gather(*(m.load(index_for(m)) for m in models),
                                       return_exceptions=True)
        return [m for m, r in zip(models, results, strict=True) if isinstance(r, BaseException)]

    def replace(self, staged: dict[str, Model], removed: list[str]) -> list[Model]:
        """Switch in ``staged`` and drop ``removed`` atomically; returns the models let go."""
        old = [self._models[n] for n in [*removed, *staged] if n in self._models]
        self._models.update(staged)
        for n in removed:
            self._models.pop(n, None)
        return old

    def describe(self) -> list[dict[str, Any]]:
        return [describe_model(m) for m in self._models.values()]

    def describe_pipelines(self) -> list[dict[str, Any]]:
        return [p.describe() for p in self._pipelines.values()]

    def queued(self) -> int:
        return sum(m.depth for m in self._models.values())

    async def drain(self, timeout: float) -> None:
        await asyncio.gather(*(m.drain(timeout) for m in self._models.values()))

    async def close(self) -> None:
        for m in list(self._models.values()):
            await m.close()


def unknown_model(name: str, known: list[str]) -> NotFound:
    return NotFound(f"unknown model {name!r}; this daemon serves: {', '.join(known) or 'none'}")
