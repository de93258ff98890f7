"""Metrics (spec 4.8): the RemoteConnector's Prometheus collectors count what it
does, under the specification's names, and `metrics: false` records nothing."""

import pytest
from prometheus_client import REGISTRY

from tests.glue.harness import KiB, MiB, full_chunk, keys
from tests.glue.test_remote import put, stack  # noqa: F401 (fixture)

from lmcache_aerospike import metrics


def sample(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_remote_ops_are_counted_by_op_and_result(stack):  # noqa: F811
    rb, cpu, conn = stack.backend(8 * MiB)
    hit, miss = keys(2)
    before = {
        "put": sample("aerospike_op_total", op="put", result="ok"),
        "get_hit": sample("aerospike_op_total", op="get", result="hit"),
        "get_miss": sample("aerospike_op_total", op="get", result="miss"),
        "contains": sample("aerospike_op_total", op="batched_contains", result="hit"),
        "latency": sample("aerospike_op_latency_seconds_count", op="get"),
        "chunks": sample("aerospike_segment_count_count"),
        "records": sample("aerospike_segment_bytes_count"),
    }
    obj = full_chunk(cpu, conn)
    put(rb, hit, obj)
    for k in (hit, miss):
        got = rb.get_blocking(k)
        if got is not None:
            got.ref_count_down()
    assert rb.batched_contains([hit, miss]) == 1
    obj.ref_count_down()

    assert sample("aerospike_op_total", op="put", result="ok") - before["put"] == 1
    assert sample("aerospike_op_total", op="get", result="hit") - before["get_hit"] == 1
    assert sample("aerospike_op_total", op="get", result="miss") - before["get_miss"] == 1
    assert sample("aerospike_op_total", op="batched_contains", result="hit") - \
        before["contains"] == 1
    assert sample("aerospike_op_latency_seconds_count", op="get") - before["latency"] == 2
    # 8 MiB in segments of the engine's plan: one chunk, plan[0] records.
    nseg = conn.native.plan(8 * MiB)[0]
    assert nseg > 1
    assert sample("aerospike_segment_count_count") - before["chunks"] == 1
    assert sample("aerospike_segment_bytes_count") - before["records"] == nseg
    assert sample("aerospike_concurrent_in_flight") == 0  # nothing left in the engine


def test_metrics_false_records_nothing(stack):  # noqa: F811
    rb, cpu, conn = stack.backend(64 * KiB, extra={"metrics": False})
    assert conn.metrics is metrics.disabled()
    before = sample("aerospike_op_total", op="put", result="ok")
    (k,) = keys(1)
    obj = full_chunk(cpu, conn)
    put(rb, k, obj)
    obj.ref_count_down()
    assert sample("aerospike_op_total", op="put", result="ok") == before


@pytest.mark.parametrize("error, label", [
    ("ETIMEOUT: read timed out", "timeout"), ("ETOO_BIG: 9 MiB", "record_too_big"),
    ("EBUSY: key busy", "busy"), ("ECONNECTION: refused", "error"), ("odd", "error")])
def test_error_texts_map_to_the_specs_result_labels(error, label):
    assert metrics.result_of(error) == label
