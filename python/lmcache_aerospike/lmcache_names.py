"""LMCache's names that moved between the releases we support, from one place.

LMCache 0.5.7 moved its in-process engine under `lmcache.inprocess` (the
`lmcache.v1.storage_backend` modules, and `lmcache.v1.protocol`'s dtype tables,
stayed where they were). Each name is taken from 0.5.7's place first, then from
0.5.6's.
"""

try:  # 0.5.7: lmcache/inprocess/v1/{cache_engine,protocol}.py, .../gpu_connector/
    from lmcache.inprocess.v1.cache_engine import LMCacheEngineBuilder
    from lmcache.inprocess.v1.gpu_connector.gpu_connectors import GPUConnectorInterface
    from lmcache.inprocess.v1.protocol import RemoteMetadata
except ImportError:  # 0.5.6: lmcache/v1/{cache_engine,protocol}.py, lmcache/v1/gpu_connector/
    from lmcache.v1.cache_engine import LMCacheEngineBuilder
    from lmcache.v1.gpu_connector import GPUConnectorInterface
    from lmcache.v1.protocol import RemoteMetadata

__all__ = ["GPUConnectorInterface", "LMCacheEngineBuilder", "RemoteMetadata"]
