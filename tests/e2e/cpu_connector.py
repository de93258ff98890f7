"""The CPU KV connector the e2e tests drive LMCache's engine with. It ships in
the package (the `demo` command needs it from a pip install); see its docstring
for the GPUConnectorInterface it implements and the LMCache source it cites."""

from lmcache_aerospike.cli.demo_kv import CPUPagedConnector

__all__ = ["CPUPagedConnector"]
