"""The dashboard's building blocks: the template variables' selectors, a Prometheus query, and the
time series panel most of the board is made of (``dashboard.py`` and ``data_panels.py`` use them).

Every query filters on the ``job`` template variable, and each per-model one on ``model`` (and
``version`` where the family has it): the selectors below are the only way a panel writes them.
"""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.builders.common import StackingConfig, VizLegendOptions, VizTooltipOptions
from grafana_foundation_sdk.models.common import (
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    StackingMode,
    TooltipDisplayMode,
)
from grafana_foundation_sdk.models.dashboard import DataSourceRef
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

#: The template variables' selector, added to every per-model query.
VERSION = '{job=~"$job", model=~"$model", version=~"$version"}'
MODEL = '{job=~"$job", model=~"$model"}'
JOB = '{job=~"$job"}'
RATE = "[$__rate_interval]"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")

Query = tuple[str, str]
"""A panel's PromQL and its legend."""


def prometheus_query(
    expr: str, legend: str, ref_id: str = "A", *, heatmap_format: bool = False
) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).legend_format(legend).datasource(DATASOURCE).range()
    query = query.ref_id(ref_id)
    return query.format(PromQueryFormat.HEATMAP) if heatmap_format else query


def timeseries_panel(
    title: str, unit: str, queries: Sequence[Query], description: str, *, percent: bool = False
) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
    panel = panel.height(8).span(12)
    panel = panel.legend(
        VizLegendOptions()
        .display_mode(LegendDisplayMode.LIST)
        .placement(LegendPlacement.BOTTOM)
        .show_legend(True)
    ).tooltip(VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING))
    if percent:
        panel = panel.stacking(StackingConfig().mode(StackingMode.PERCENT)).fill_opacity(60)
    for ref_id, (expr, legend) in zip("ABCDEFGH", queries, strict=False):
        panel = panel.with_target(prometheus_query(expr, legend, ref_id))
    return panel
