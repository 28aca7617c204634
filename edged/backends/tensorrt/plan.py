"""Is this TensorRT plan loadable here? Checked from its sidecar, before any GPU call.

Why apart from the backend: a plan is tied to the TensorRT version, the GPU's compute
capability, the CPU architecture and (on a Jetson) the L4T release it was built with.
What needs no GPU (a plan copied from a Jetson to a PC, from another JetPack) is said
even where TensorRT or CUDA is missing; ``edged compile`` and tests use the same rules.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from edged.backends.tensorrt.keys import rebuild_command
from edged.errors import ArtifactError

log = logging.getLogger("edged.backends.tensorrt")


def _version_tuple(v: str) -> tuple[int, ...]:
    parts: list[int] = []
    for p in str(v).split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _cc_tuple(cc: Any) -> tuple[int, int] | None:
    if cc is None:
        return None
    t = _version_tuple(str(cc))
    return (t[0], t[1] if len(t) > 1 else 0) if t else None


def check_plan_compat(
    plan: Path,
    sidecar: dict[str, Any] | None,
    *,
    trt_version: str | None,
    compute_capability: str | None,
    gpu_name: str | None = None,
    arch: str | None = None,
    l4t: str | None = None,
    allow_host_code: bool = False,
) -> None:
    """Refuse a plan whose sidecar says it cannot load here, before TensorRT tries.

    Every difference is named in one ArtifactError, with the command that rebuilds
    the directory's plans on this device. ``trt_version``/``compute_capability`` None
    skip those rules, so the platform and L4T can be checked before TensorRT loads. A
    plan without a sidecar is not checked here (TensorRT's own check still runs). The
    rules are in ``plan_mismatches``.
    """
    if sidecar is None:
        return
    backend = sidecar.get("backend")
    if backend not in (None, "tensorrt"):
        raise ArtifactError(f"{plan}: sidecar says this artifact is for backend {backend!r}")
    problems = plan_mismatches(
        sidecar, trt_version=trt_version, compute_capability=compute_capability,
        gpu_name=gpu_name, arch=arch, l4t=l4t, allow_host_code=allow_host_code)
    if not problems:
        return
    source = (sidecar.get("source") or {}).get("path")
    raise ArtifactError(
        f"{plan}: {'; '.join(problems)}: rebuild it on this device "
        f"({rebuild_command(source, plan.parent)}); the daemon never builds plans itself"
    )


def plan_mismatches(
    sidecar: dict[str, Any],
    *,
    trt_version: str | None,
    compute_capability: str | None,
    gpu_name: str | None = None,
    arch: str | None = None,
    l4t: str | None = None,
    allow_host_code: bool = False,
) -> list[str]:
    """Why the plan described by ``sidecar`` cannot load on this device (empty: it can).

    Rules (TensorRT "Engine Compatibility" docs):
    * Without version compatibility a plan loads only on the exact TensorRT version
      it was built with. With it, any later version loads it (10 -> 11 included),
      an older one never does, and the runtime must allow the plan's host code.
    * Without hardware compatibility a plan runs only on the compute capability it was
      built for; ``ampere_plus`` plans run on any SM >= 8.0.
    * On a Jetson the L4T (JetPack) release fixes TensorRT, CUDA and the driver: a plan
      from another release is refused (unless version-compatible). Checked only when
      the sidecar records ``target.l4t`` (plans built by this version of edged do).
    * Plans are not portable across CPU architectures / platforms.
    """
    target = sidecar.get("target") or {}
    tools = sidecar.get("tools") or {}
    problems: list[str] = []

    built_arch = target.get("arch")
    if arch and built_arch and built_arch != arch:
        problems.append(f"plan was built on {built_arch}, this machine is {arch}; TensorRT "
                        "plans are not portable across platforms")

    version_compatible = bool(target.get("version_compatible"))
    built = tools.get("tensorrt")
    if built and trt_version:
        b, r = _version_tuple(built), _version_tuple(trt_version)
        n = min(len(b), len(r))
        if version_compatible:
            if r[:n] < b[:n]:
                problems.append(
                    f"plan was built with TensorRT {built} (version-compatible), which is newer "
                    f"than this TensorRT {trt_version}; version-compatible plans only load on "
                    "the same or a later TensorRT (or upgrade TensorRT)")
            elif not allow_host_code:
                problems.append(
                    "plan is version-compatible and embeds TensorRT host code; set "
                    "version_compatible = true in this variant's [models.variants.options] "
                    "if you trust the plan")
        elif b[:n] != r[:n]:
            problems.append(
                f"plan was built with TensorRT {built} but this is TensorRT {trt_version}; a "
                "plan loads only on the exact TensorRT version that built it (unless built "
                "version-compatible)")

    if "l4t" in target and not version_compatible and target.get("l4t") != l4t:
        was = f"L4T {target['l4t']}" if target.get("l4t") else "a machine that is not a Jetson"
        now = f"L4T {l4t}" if l4t else "not a Jetson (no /etc/nv_tegra_release)"
        problems.append(f"plan was built on {was} but this device is {now}; a JetPack "
                        "release brings its own TensorRT, CUDA and driver")

    built_cc = _cc_tuple(target.get("compute_capability"))
    here_cc = _cc_tuple(compute_capability)
    if built_cc and here_cc and built_cc != here_cc:
        level = str(target.get("hardware_compatibility") or "none").lower()
        if not (level in ("ampere_plus", "ampere+") and here_cc >= (8, 0)):
            built_gpu = f" ({target['gpu']})" if target.get("gpu") else ""
            here_gpu = f" ({gpu_name})" if gpu_name else ""
            problems.append(
                f"plan was built for GPU compute capability {built_cc[0]}.{built_cc[1]}"
                f"{built_gpu} but this GPU is {here_cc[0]}.{here_cc[1]}{here_gpu}; a plan runs "
                "only on the SM it was built for (unless built with hardware compatibility "
                "ampere_plus, SM >= 8.0)")
    elif built_cc and here_cc and gpu_name and target.get("gpu") and target["gpu"] != gpu_name:
        # Same SM, another GPU model: TensorRT loads it (with a warning of its own), but
        # the tactics were timed on the other model; say so without refusing.
        log.warning("plan was built on %s, this GPU is %s (same SM %s): it loads, but rebuild "
                    "on this model for the best speed", target["gpu"], gpu_name,
                    target.get("compute_capability"))
    return problems


def read_plan(path: Path, sidecar: dict[str, Any] | None) -> bytes:
    """The plan's bytes, checked against the size/sha256 the sidecar recorded."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ArtifactError(f"cannot read TensorRT plan {path}: {e}") from e
    recorded = (sidecar or {}).get("plan") or {}
    want_size = recorded.get("bytes")
    if isinstance(want_size, int) and want_size != len(data):
        raise ArtifactError(
            f"{path}: plan is {len(data)} bytes but {want_size} were written at build time: "
            "the file is truncated or was replaced; copy it again or rebuild it"
        )
    want_sha = recorded.get("sha256")
    if isinstance(want_sha, str) and hashlib.sha256(data).hexdigest() != want_sha:
        raise ArtifactError(
            f"{path}: plan's sha256 differs from the one recorded at build time: "
            "the file is corrupt or was replaced; copy it again or rebuild it"
        )
    return data


# -- the backend ------------------------------------------------------------------------
