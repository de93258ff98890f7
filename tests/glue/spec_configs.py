"""The configurations of the specification (aerospike-backend-design.md, 4.5.1),
verbatim, for the tests that check they work as written."""

SPEC_YAML = """\
chunk_size: 256
local_cpu: true
max_local_cpu_size: 20
remote_storage_plugins: ["aerospike"]
extra_config:
  remote_storage_plugin.aerospike.module_path: lmcache_aerospike.adapter
  remote_storage_plugin.aerospike.class_name: AerospikeConnectorAdapter
  remote_storage_plugin.aerospike.hosts: "aerospike-0:3000,aerospike-1:3000"
  remote_storage_plugin.aerospike.namespace: lmcache
  remote_storage_plugin.aerospike.set: kv_chunks
  remote_storage_plugin.aerospike.target_segment_bytes: 4194304
  # max_segment_bytes is discovered from the server at startup (see Section 4.3.6).
  # Uncomment to override; the override is clamped to the server's cap.
  # remote_storage_plugin.aerospike.max_segment_bytes: 4128768
  remote_storage_plugin.aerospike.min_segment_bytes: 65536
  # single_record_threshold_bytes defaults to min(target_segment_bytes, max_segment_bytes).
  # remote_storage_plugin.aerospike.single_record_threshold_bytes: 4194304
  remote_storage_plugin.aerospike.default_ttl_seconds: 86400
  remote_storage_plugin.aerospike.read_timeout_ms: 1000
  remote_storage_plugin.aerospike.write_timeout_ms: 2000
  remote_storage_plugin.aerospike.batch_max_in_flight: 64
  remote_storage_plugin.aerospike.executor_threads: 16
  remote_storage_plugin.aerospike.enable_list: false
  remote_storage_plugin.aerospike.enable_crc32: false
  remote_storage_plugin.aerospike.enable_repair_scan: false
  remote_storage_plugin.aerospike.commit_level: all
  remote_storage_plugin.aerospike.replica: sequence
"""

SPEC_MULTI_YAML = """\
remote_storage_plugins: ["aerospike.primary", "aerospike.dr"]
extra_config:
  remote_storage_plugin.aerospike.primary.module_path: lmcache_aerospike.adapter
  remote_storage_plugin.aerospike.primary.class_name: AerospikeConnectorAdapter
  remote_storage_plugin.aerospike.primary.hosts: "as-primary:3000"
  remote_storage_plugin.aerospike.primary.namespace: lmcache
  remote_storage_plugin.aerospike.dr.module_path: lmcache_aerospike.adapter
  remote_storage_plugin.aerospike.dr.class_name: AerospikeConnectorAdapter
  remote_storage_plugin.aerospike.dr.hosts: "as-dr:3000"
  remote_storage_plugin.aerospike.dr.namespace: lmcache
"""
