"""The module path the spec's configuration names (remote_storage_plugin.aerospike.module_path:
lmcache_aerospike.adapter); the plugin lives in lmcache_aerospike.remote."""

from lmcache_aerospike.remote import AerospikeConnectorAdapter, AerospikeRemoteConnector

__all__ = ["AerospikeConnectorAdapter", "AerospikeRemoteConnector"]
