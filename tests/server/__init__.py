"""Protocol-level Aerospike test server (see README.md)."""
