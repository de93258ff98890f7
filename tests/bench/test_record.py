"""bench/record.py: what a benchmark's record says of itself (date, command, commit,
machine, the server's build), so a table in the docs can be read and rerun."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import record  # noqa: E402

from tests.conftest import info  # noqa: E402


def test_the_provenance_names_the_command_commit_machine_and_server(aerospike_hosts):
    p = record.provenance(aerospike_hosts, ("pytest", "no-such-package"),
                          script=os.path.join(record.TOP, "bench", "x.py"),
                          argv=["--hosts", aerospike_hosts])
    assert p["command"].endswith(f"bench/x.py --hosts {aerospike_hosts}")
    assert re.fullmatch(r"[0-9a-f]{12}( \(with uncommitted changes\))?", p["commit"])
    assert f"{os.cpu_count()} CPUs" in p["machine"]
    assert p["aerospike_server"] == info(aerospike_hosts, "build")
    assert p["pytest"] and p["no-such-package"] is None


def test_an_unreachable_server_is_a_label_not_a_failure():
    assert record.server_build("127.0.0.1:1").startswith("unknown (")


def test_the_record_is_written_as_json_and_markdown(tmp_path):
    p = {"date": "2026-12-05T00:00:00+00:00", "command": "python b.py", "commit": "abc",
         "machine": "m", "aerospike_server": "8.1.2.0", "lmcache": "0.5.6",
         "redis_server": "redis-server 7.0.15", "vllm": None}
    head = record.header_line(p)
    assert head == ("2026-12-05T00:00:00+00:00; Aerospike 8.1.2.0; lmcache 0.5.6; "
                    "redis-server 7.0.15; m; commit abc.\n\n    python b.py\n")
    paths = record.write(str(tmp_path / "r"), "bench", {"provenance": p}, "# t\n" + head)
    assert [os.path.basename(x) for x in paths] == ["bench.json", "bench.md"]
    assert json.loads(open(paths[0]).read())["provenance"] == p
    assert open(paths[1]).read().startswith("# t\n2026-12-05")
