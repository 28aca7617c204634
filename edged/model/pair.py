"""A rung of two members: its variant computes lone rows, its ``batch_variant`` batches.

Why: two variants of equal quality can split the work a model does. ONNX Runtime INT8
answers one MobileNetV2 row in 2.5 ms where OpenVINO INT8 takes 4.3 ms, and OpenVINO
computes 620 rows/s at batch 8 where ONNX Runtime computes 508 (``edged compile``'s own
timing): neither is faster at every batch size, so ``edged compile`` keeps both as one
rung (docs/compile.md, "Pairs"), and the model's worker picks the member per batch
(``Model._compute``: one comparison of the batch's rows). The governor steps rungs, so
the two are opened, checked, held, swapped and closed together (``open.Loaded.batch``).

The member is checked against the reference like any variant, on its rung's check
inputs. A member that cannot serve is left out, said in the log and the metrics: the
rung serves on its variant alone, which passed its own check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from edged.config.models import ModelConfig
from edged.model.contract import InputContract, check_spec
from edged.model.heads import Head
from edged.model.open import Loaded, check_candidate, open_batch_member
from edged.model.variant_record import VariantRecord
from edged.verify.compare import VerifyRefused
from edged.verify.verifier import Opened, Reference, Verifier

log = logging.getLogger("edged.model")

WithReference = Callable[[Callable[[Opened], Reference]], Reference]


class Pairs:
    """Opens and checks a rung's batch member beside its variant (blocking; on a thread)."""

    def __init__(self, record: VariantRecord, verifier: Verifier, head: Head) -> None:
        self.record = record
        self.verifier = verifier
        self.head = head

    def attach(self, cfg: ModelConfig, loaded: Loaded, ref: Reference | None,
               contract: InputContract | None, with_reference: WithReference) -> Loaded:
        """``loaded`` (checked) with its rung's member open and checked in ``.batch``, or
        alone when the rung has none or the member cannot serve. ``ref``: the reference's
        results on the rung's check inputs (None: the rung is the reference or unverified)."""
        m = loaded.config.batch_variant
        if m is None:
            return loaded
        try:
            loaded.batch = self._checked(cfg, loaded, ref, contract, with_reference)
        except Exception as e:
            if isinstance(e, VerifyRefused):
                self.record.refused(m.name, e)
            else:
                self.record.load_failed(m.name, f"{type(e).__name__}: {e}")
            log.warning("model=%s variant=%s serves alone: its batch_variant %s was not "
                        "taken: %s", cfg.name, loaded.config.name, m.name, e)
        return loaded

    def _checked(self, cfg: ModelConfig, loaded: Loaded, ref: Reference | None,
                 contract: InputContract | None, with_reference: WithReference) -> Loaded:
        m = loaded.config.batch_variant
        assert m is not None
        member = open_batch_member(cfg, loaded.index, self.head)
        c = contract
        check_candidate(m, member.backend, c.inputs if c else list(loaded.backend.inputs),
                        c.outputs if c else list(loaded.backend.outputs))  # closes on failure
        if not m.verify.enabled:
            self.record.unverified(m.name)
            return member
        try:
            if ref is None:  # the rung is the reference (``loaded``, not live yet), or unverified
                own = loaded.index == self.verifier.reference_index
                ref = self.verifier.reference(
                    loaded.index, check_spec(c),
                    (lambda job: job(loaded)) if own else with_reference)
            self.record.checked(m.name, self.verifier.check(member, ref))
        except Exception:
            member.backend.close()
            raise
        return member

    def reopen(self, cfg: ModelConfig, old: Loaded, loaded: Loaded) -> Loaded:
        """``loaded`` (rung ``old`` opened again) with the member ``old`` had, opened again
        without a check (it passed one when ``old`` went live)."""
        if old.batch is not None:
            try:
                loaded.batch = open_batch_member(cfg, old.index, self.head)
            except Exception as e:
                log.warning("model=%s variant=%s serves alone: %s", cfg.name,
                            loaded.config.name, e)
        return loaded
