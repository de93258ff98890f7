"""lmcache-aerospike: an Aerospike-backed remote KV-cache tier for LMCache.

The work is done by the C engine in ``lmcache_aerospike._native``; this package
holds the thin glue for LMCache's plugin surfaces.
"""

from lmcache_aerospike._native import (  # noqa: F401  (re-exported)
    Connector,
    Error,
    __version__,
    aerospike_client_version,
)

__all__ = ["Connector", "Error", "__version__", "aerospike_client_version"]
