"""Alerts and dashboards for a conch deployment: the PrometheusRule, the promtool rules file and the
Grafana dashboard that `conch deploy monitoring` writes."""
