"""Observability artifacts: Prometheus alert rules, the Grafana dashboard, docs/metrics.md.

Real tools where they exist: `promtool` (Debian package `prometheus`) checks the
rules, runs their unit tests (deploy/prometheus/edged-alerts.test.yml: synthetic
series -> expected alerts), parses every dashboard query, and lints the real
exposition of edged's registry. Without promtool those tests skip and the
plain-text checks still run: every metric a rule, panel or doc names is one the
daemon exports, and every exported metric is documented.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "edged-alerts.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "edged-alerts.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "edged-dashboard.json"
METRICS_DOC = REPO / "docs" / "metrics.md"
OPERATIONS_DOC = REPO / "docs" / "operations.md"

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not found (apt-get install prometheus)"
)

# The contract: the exact names edged exports (series names as scraped).
HISTOGRAMS = {
    "edged_request_duration_seconds",
    "edged_queue_duration_seconds",
    "edged_compute_duration_seconds",
    "edged_batch_size",
    "edged_frigate_request_duration_seconds",
    "edged_postprocess_duration_seconds",
    "edged_detections_per_frame",
    "edged_kserve_request_duration_seconds",
    "edged_offload_remote_duration_seconds",
}
EDGED_METRICS = HISTOGRAMS | {
    "edged_requests_total",
    "edged_queue_depth",
    "edged_queue_capacity",
    "edged_model_loads_total",
    "edged_model_load_duration_seconds",
    "edged_model_ready",
    "edged_active_variant_info",
    "edged_live_artifact_info",
    "edged_variant_swaps_total",
    "edged_variant_checks_total",
    "edged_kserve_requests_total",
    "edged_offload_requests_total",
    "edged_offload_remote_up",
    "edged_config_reloads_total",
    "edged_build_info",
    "edged_energy_joules_total",
    "edged_inflight_requests",
    "edged_frigate_requests_total",
    "edged_frigate_transfers_total",
    "edged_frigate_label_fallbacks_total",
    "edged_pipeline_boxes_total",
    "edged_pipeline_untracked_boxes_total",
    "edged_store_bytes",
    "edged_store_quota_bytes",
    "edged_store_versions",
    "edged_store_evictions_total",
    "edged_model_version_info",
    "edged_model_updates_total",
    "edged_stream_frames_total",
    "edged_streams",
    "edged_sensor_temperature_celsius",
    "edged_sensor_power_watts",
    "edged_sensor_battery_ratio",
    "edged_sensor_throttled",
    "edged_sensor_stale",
    "edged_governor_level",
    "edged_governor_level_info",
    "edged_governor_level_seconds_total",
    "edged_thermal_headroom_ratio",
    "edged_power_watts",
    "edged_energy_budget_left_joules",
    "edged_energy_mission_left_seconds",
}
# prometheus_client's process collector, plus Prometheus' own `up`.
OTHER_METRICS = {
    "process_start_time_seconds",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "python_info",
    "up",
}


def series_names() -> set[str]:
    """Every series name a query may use: histograms add _bucket/_sum/_count."""
    names = set(EDGED_METRICS | OTHER_METRICS)
    for h in HISTOGRAMS:
        names |= {f"{h}_bucket", f"{h}_sum", f"{h}_count"}
    return names


def metric_names_in(text: str) -> set[str]:
    """Identifiers in PromQL (or prose) that look like metric names we care about."""
    return set(re.findall(r"\b((?:edged|process|python)_[a-z0-9_]*[a-z0-9])\b", text))


def alert_blocks() -> list[str]:
    return re.split(r"\n\s*- alert: ", RULES.read_text())[1:]


def dashboard_exprs() -> list[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in data["annotations"]["list"] if "expr" in a]
    exprs += [v["definition"] for v in data["templating"]["list"] if v.get("definition")]
    return exprs


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


# -- alert rules --------------------------------------------------------------


@needs_promtool
def test_promtool_check_rules() -> None:
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@needs_promtool
def test_promtool_rule_unit_tests() -> None:
    """Synthetic series make each alert fire (and not fire) exactly when intended."""
    proc = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_required_alerts_exist() -> None:
    names = {block.split("\n", 1)[0].strip() for block in alert_blocks()}
    assert {
        "EdgedThermalThrottling",
        "EdgedQueueSaturated",
        "EdgedHighErrorRatio",
        "EdgedRestarting",
        "EdgedModelLoadFailed",
        "EdgedSensorStale",
        "EdgedOffFleetVersion",
    } <= names


def test_every_alert_has_severity_summary_and_existing_runbook() -> None:
    anchors = markdown_anchors(OPERATIONS_DOC.read_text())
    for block in alert_blocks():
        name = block.split("\n", 1)[0].strip()
        assert re.search(r"severity: (critical|warning|info)\b", block), name
        assert "summary:" in block, name
        match = re.search(r'runbook: "docs/operations\.md#([a-z0-9-]+)"', block)
        assert match, f"{name}: no runbook annotation"
        assert match.group(1) in anchors, f"{name}: no section #{match.group(1)}"


def test_rules_use_only_exported_metrics() -> None:
    used = metric_names_in(RULES.read_text())
    assert used, "no metric names found"
    assert used <= series_names(), used - series_names()
    assert "edged_governor_level" in used and "edged_queue_capacity" in used


# -- dashboard ------------------------------------------------------------------


def test_dashboard_is_valid_grafana_json() -> None:
    data = json.loads(DASHBOARD.read_text())
    assert data["uid"] and data["title"]
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in data["templating"]["list"]}
    assert {"datasource", "job", "instance", "model"} <= variables
    for panel in data["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]


def test_dashboard_covers_the_asked_views() -> None:
    text = " ".join(dashboard_exprs())
    for needle in (
        "edged_requests_total",  # requests/s by status
        "histogram_quantile(0.5, sum by (le, model) (rate(edged_request_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le, model) (rate(edged_request_duration_seconds_bucket",
        "edged_queue_depth",
        "edged_batch_size_bucket",
        "edged_governor_level",
        "edged_sensor_temperature_celsius",
        "edged_sensor_power_watts",
        "edged_active_variant_info",
        "edged_variant_swaps_total",
        "edged_model_version_info",  # which version on which device
    ):
        assert needle in text, needle


def test_dashboard_uses_only_exported_metrics() -> None:
    used = set().union(*(metric_names_in(e) for e in dashboard_exprs()))
    assert used <= series_names(), used - series_names()


@needs_promtool
def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Each panel query, with Grafana's variables filled in, is valid PromQL."""
    subs = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(dashboard_exprs()):
        if expr.startswith("label_values("):
            inner = re.fullmatch(r"label_values\((.*), *\w+\)", expr)
            assert inner, expr
            expr = inner.group(1)
        for k, v in subs.items():
            expr = expr.replace(k, v)
        expr = re.sub(r"\$(\w+)", r".*", expr)  # $job, $instance, $model (used as =~)
        lines.append(f"      - record: dashboard:q{i}")
        lines.append(f"        expr: {json.dumps(expr)}")
    rules = tmp_path / "dashboard-rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    proc = promtool("check", "rules", str(rules))
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- docs/metrics.md and the daemon's real registry --------------------------------


def test_metrics_doc_lists_every_metric_and_nothing_else() -> None:
    doc = METRICS_DOC.read_text()
    documented = {m for m in metric_names_in(doc) if m.startswith("edged_")}
    missing = EDGED_METRICS - documented
    assert not missing, f"not in docs/metrics.md: {sorted(missing)}"
    unknown = documented - series_names()
    assert not unknown, f"docs/metrics.md names metrics edged does not export: {sorted(unknown)}"


def _registry():
    try:
        from edged.governor.metrics import GovernorMetrics
        from edged.metrics import Metrics
    except ImportError as exc:  # another part of the daemon is mid-change
        pytest.skip(f"edged.metrics not importable: {exc}")
    metrics = Metrics()
    GovernorMetrics(metrics.registry, ["normal"])
    return metrics.registry


def test_daemon_registry_matches_the_contract() -> None:
    """The names the daemon really registers == the list alerts, dashboard and docs use."""
    suffix = {"counter": "_total", "info": "_info"}
    exported = {
        family.name + suffix.get(family.type, "")
        for family in _registry().collect()
        if family.name.startswith("edged_")
    }
    assert exported == EDGED_METRICS, {
        "registered but not in the contract": sorted(exported - EDGED_METRICS),
        "in the contract but not registered": sorted(EDGED_METRICS - exported),
    }


@needs_promtool
def test_promtool_lints_the_real_exposition() -> None:
    from prometheus_client import generate_latest

    proc = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=generate_latest(_registry()),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr).decode()


def markdown_anchors(text: str) -> set[str]:
    """GitHub-style heading anchors: lowercase, punctuation dropped, spaces -> '-'."""
    anchors = set()
    for line in text.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            title = match.group(1).strip().lower()
            title = re.sub(r"[^\w\- ]", "", title)
            anchors.add(title.replace(" ", "-"))
    return anchors
