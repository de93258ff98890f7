"""docs/grafana-dashboard.json queries only what the Prometheus exporter
(python/lmcache_aerospike/metrics.py) exports: its metric names, label names and
the result labels the glue gives."""

import json
import os
import re

import pytest

from lmcache_aerospike import metrics

pytest.importorskip("prometheus_client")

DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "grafana-dashboard.json")
RESULTS = {"hit", "miss", "ok", "timeout", "record_too_big", "busy", "full", "error"}
OPS = {"get", "put", "exists", "batched_get", "batched_put", "batched_contains",
       "batched_async_contains", "remove", "lookup", "store", "load", "delete"}
PROMQL = {"sum", "by", "rate", "histogram_quantile", "le"}


def exported():
    """{sample name: label names} of the exporter's collectors (a histogram's
    _bucket, _sum and _count, a counter's _total)."""
    import prometheus_client as p

    metrics.prometheus()  # registers in the default registry, once
    names = {}
    for collector, samples in list(p.REGISTRY._collector_to_names.items()):
        for name in samples:
            if name.startswith("aerospike_"):
                names[name] = set(getattr(collector, "_labelnames", ()))
    return names


def queries():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    assert dash["panels"], "a dashboard with no panels"
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def test_every_query_names_an_exported_metric():
    names = exported()
    for title, expr in queries():
        used = set(re.findall(r"\baerospike_\w+", expr))
        assert used, f"panel {title!r} queries none of ours: {expr}"
        assert used <= set(names), f"panel {title!r}: {used - set(names)} not exported"


def test_labels_and_values_are_the_exporters():
    names = exported()
    labels = set().union(*names.values()) | {"le"}
    for title, expr in queries():
        for name, value in re.findall(r'(\w+)=~?"([^"]*)"', expr):
            assert name in labels, f"panel {title!r}: label {name} is not exported"
            allowed = RESULTS if name == "result" else OPS
            assert set(value.split("|")) <= allowed, f"panel {title!r}: {value}"
        for group in re.findall(r"by \(([^)]*)\)", expr):
            assert {g.strip() for g in group.split(",")} <= labels, f"panel {title!r}: {group}"
