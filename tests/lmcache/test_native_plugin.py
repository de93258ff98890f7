"""The "native_plugin" L2 adapter type: LMCache's NativeConnectorL2Adapter
loads lmcache_aerospike._native.Connector from its JSON config. The contract
every adapter meets is in test_l2_contract.py; this is what is particular to it."""

import pytest

from tests.lmcache.l2_driver import build, native_plugin_spec
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    NativeConnectorL2Adapter,
)

from lmcache_aerospike import _native  # noqa: E402


def test_native_plugin_config_loads_our_connector(aerospike_hosts):
    adapter = build(native_plugin_spec(aerospike_hosts))
    try:
        assert isinstance(adapter, NativeConnectorL2Adapter)
        assert isinstance(adapter._client, _native.Connector)
        fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(),
               adapter.get_load_event_fd(), adapter._client.event_fd()}
        assert len(fds) == 4
        assert adapter.report_status()["is_healthy"]
    finally:
        adapter.close()


def test_bad_adapter_params_fail_with_our_config_error(aerospike_hosts):
    with pytest.raises(_native.ConfigError, match="target_segment_bytes"):
        build(native_plugin_spec(aerospike_hosts, target_segment_bytes="lots"))
