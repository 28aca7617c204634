"""A pipeline's step-down plan: the order in which its members get lighter under heat or load.

Why one ladder for the whole pipeline: the governor's level and the load rule each ask
for *n steps down*. For a lone model a step is a rung of its ladder. For a pipeline the
cheapest thing to give up is an optional stage (a label on each box), not the detector
(the boxes themselves), so a step is a rung of whichever member comes first in
``step_down_order``: that member walks down its ladder, is then shed if it is an optional
stage, and only then does the next member move. With the digits reader (``digit``: three
rungs, optional; the detector: three rungs) the positions are::

    0 all heaviest · 1 digit: cnn-int8 · 2 digit: small-fp32 · 3 digit: shed
    4 detector: det-int8 · 5 detector: det128-fp32

Pure: ``at(position)`` says each member model's ladder index and the stages shed.
"""

from __future__ import annotations

from dataclasses import dataclass

from edged.config.pipelines import DETECTOR, PipelineConfig


@dataclass(frozen=True)
class Step:
    member: str  # a stage's name or "detector"
    model: str
    #: the ladder index this step moves the member's model to; None: the stage is shed
    index: int | None
    what: str  # the position's name ("digit: cnn-int8", "digit: shed")


@dataclass(frozen=True)
class Placement:
    """What a position asks of each member."""

    indexes: dict[str, int]  # model -> ladder index (0 = heaviest)
    shed: frozenset[str]  # stages not run at this position


class StepPlan:
    def __init__(self, cfg: PipelineConfig, ladders: dict[str, list[str]]) -> None:
        """``ladders``: each member model's variant names, heaviest first."""
        optional = {s.name: s.optional for s in cfg.stages}
        steps: list[Step] = []
        for member in cfg.step_down_order:
            model = cfg.member_model(member)
            names = ladders.get(model, [])
            steps += [Step(member, model, i, f"{member}: {names[i]}")
                      for i in range(1, len(names))]
            if member != DETECTOR and optional.get(member, False):
                steps.append(Step(member, model, None, f"{member}: shed"))
        self.steps = steps
        self.models = cfg.models

    def __len__(self) -> int:
        """The last position (every step taken)."""
        return len(self.steps)

    @property
    def names(self) -> list[str]:
        """Each position's name, position 0 first."""
        return ["all heaviest", *(s.what for s in self.steps)]

    def at(self, position: int) -> Placement:
        indexes = dict.fromkeys(self.models, 0)
        shed: set[str] = set()
        for s in self.steps[:max(0, position)]:
            if s.index is None:
                shed.add(s.member)
            else:
                indexes[s.model] = max(indexes[s.model], s.index)
        return Placement(indexes, frozenset(shed))

    def index_of(self, model: str, position: int) -> int:
        """The ladder index ``model`` runs at ``position`` (0 when not a member)."""
        return self.at(position).indexes.get(model, 0)
