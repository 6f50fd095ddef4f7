"""deploy/grafana/mgrpo-run.json reads what the monitor's Prometheus endpoint serves: valid JSON, one
`run` variable, and every metric it queries is the Prometheus name of a metric the nodes publish
(names as publish_metrics forms them: `<prefix>.<figure>`, prefixes from the actors)."""

from __future__ import annotations

import json
import re

from mgrpo_actors.monitoring.exporters import prometheus_name
from mgrpo_actors.runtime.slow_consumers import SLOW_CONSUMER_METRIC
from tests.helpers import REPO

# What the nodes publish (actors/aligner.py "<side>.", learner.py "<side>_learner.", agents' call stats
# "<agent>.<kind>.<figure>"), plus the exporter's own series.
PUBLISHED = {
    *(f"{side}.reward_mean" for side in ("main", "sub")),
    *(f"{side}_learner.{figure}" for side in ("main", "sub") for figure in ("loss", "clip_fraction", "version")),
    *(f"sub_agent.{tool}.{figure}" for tool in ("search", "visit") for figure in ("latency_ms_mean", "failures")),
    "main_agent.subtask.failures",
    SLOW_CONSUMER_METRIC,
}
EXPORTER_SERIES = {"mgrpo_step", "mgrpo_events_total"}


def test_the_dashboard_queries_only_series_the_monitor_serves():
    dashboard = json.loads((REPO / "deploy" / "grafana" / "mgrpo-run.json").read_text())
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "run"]
    served = {prometheus_name(name) for name in PUBLISHED} | EXPORTER_SERIES
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bmgrpo_[a-z_]+", target["expr"])
    }
    assert queried and queried <= served, sorted(queried - served)
    assert all('run="$run"' in target["expr"] for panel in dashboard["panels"] for target in panel["targets"])


def test_prometheus_names_keep_only_allowed_characters():
    assert prometheus_name("main.reward_mean") == "mgrpo_main_reward_mean"
    assert prometheus_name("sub_agent.search.latency-ms") == "mgrpo_sub_agent_search_latency_ms"
