"""What every step of one ``edged compile`` run shares: options, data, outcome lists.

Why its own module: step modules (``ort_steps``, ``tvm_steps``, a new runtime's) import
this and nothing above them; the run (``edged.compile.run``) imports the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edged.backends.support.isa import CpuIsa
from edged.compile.modelinfo import tool_versions
from edged.compile.options import CompileOptions

if TYPE_CHECKING:  # detect_val needs OpenCV; only detector runs import it
    from edged.compile.data import Dataset
    from edged.compile.detect_val import DetectionCheck


class StepSkipped(Exception):
    """A step that cannot run on this machine (not an error of the model)."""


@dataclass
class Context:
    opts: CompileOptions
    inputs: list[dict[str, Any]]  # the source model's I/O, as sidecars record it
    outputs: list[dict[str, Any]]
    sha: str  # the source model's sha256
    cpu: CpuIsa  # the build CPU (recorded in every sidecar)
    say: Callable[[str], None]  # one line of the run's report
    val: Dataset | None = None
    calib: Dataset | None = None
    ref_out: Any = None  # the original model's outputs on val
    detect: DetectionCheck | None = None  # a detector: validate by mAP instead
    #: the model.json the preprocessing came from (None: none was found)
    preprocess_from: Path | None = None
    failures: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)

    @property
    def src(self) -> Path:
        return self.opts.model

    @property
    def out(self) -> Path:
        return self.opts.out

    @property
    def name(self) -> str:
        return self.opts.prefix

    def base_meta(self, backend: str, precision: str, step: str,
                  tools: tuple[str, ...]) -> dict[str, Any]:
        """The sidecar fields every artifact of this run shares."""
        return {
            "source": {"path": str(self.src), "sha256": self.sha},
            "backend": backend, "precision": precision, "step": step,
            "inputs": self.inputs, "outputs": self.outputs, "tools": tool_versions(*tools),
            "build_cpu": self.cpu.to_json(),
        }
