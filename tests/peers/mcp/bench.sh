#!/usr/bin/env bash
# The MCP figures of BENCHMARKS.md: a Node server (server-everything, `echo`) and a Python one
# (mcp-server-time, `convert_time`), each started by the official SDK client directly and behind
# `sandpipe run --protocol mcp`, alternating, ROUNDS times: start to the initialize answer, and
# the mean tools/call round trip over N calls (after 10 warm-up calls). Medians are printed
# with the ratios. Then the same for tests/peers/mcp/server_2026.py (`add`) driven by the SDK's
# `Client` in each era: `legacy` (2025-11-25, initialize) and pinned to 2026-07-28 (no
# handshake: start is to the first call's answer), so both revisions are measured in one run.
# Usage: bench.sh SANDPIPE [ROUNDS] [N]; peers from .ci/setup.
set -euo pipefail
S="$1"; ROUNDS="${2:-7}"; N="${3:-300}"
P="${SANDPIPE_PEERS_DIR:-$HOME/.cache/sandpipe-ci/peers}"
PY="$P/mcp-venv/bin/python"; DRIVE="$(dirname "$0")/drive.py"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for server in "$P/mcp-npm/node_modules/.bin/mcp-server-everything" "$P/mcp-venv/bin/mcp-server-time"; do
    for i in $(seq "$ROUNDS"); do
        "$PY" "$DRIVE" bench --timings "$N" -- "$server" 2>/dev/null | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print("direct", r["initialize_s"], r["round_trip_s"])'
        "$PY" "$DRIVE" bench --timings "$N" -- "$S" run --protocol mcp "$server" 2>/dev/null | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print("behind", r["initialize_s"], r["round_trip_s"])'
    done | "$PY" -c '
import statistics, sys
rows = {}
for line in sys.stdin:
    k, init, rt = line.split()
    rows.setdefault(k, []).append((float(init), float(rt)))
m = {k: (statistics.median(i for i, _ in v), statistics.median(r for _, r in v)) for k, v in rows.items()}
d, b = m["direct"], m["behind"]
print(f"'"$(basename "$server")"': start to initialize answer {d[0]*1e3:.1f} ms direct, {b[0]*1e3:.1f} ms behind ({b[0]/d[0]:.2f}x); tools/call round trip {d[1]*1e6:.0f} us direct, {b[1]*1e6:.0f} us behind ({b[1]/d[1]:.2f}x)")
'
done
SERVER_2026="$(dirname "$0")/server_2026.py"; DRIVE_2026="$(dirname "$0")/drive_2026.py"
for mode in legacy 2026-07-28; do
    for i in $(seq "$ROUNDS"); do
        "$PY" "$DRIVE_2026" "$mode" "bench:$N" -- "$PY" "$SERVER_2026" 2>/dev/null | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print("direct", r["start_s"], r["round_trip_s"])'
        "$PY" "$DRIVE_2026" "$mode" "bench:$N" -- "$S" run --protocol mcp "$PY" "$SERVER_2026" 2>/dev/null | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print("behind", r["start_s"], r["round_trip_s"])'
    done | "$PY" -c '
import statistics, sys
rows = {}
for line in sys.stdin:
    k, start, rt = line.split()
    rows.setdefault(k, []).append((float(start), float(rt)))
m = {k: (statistics.median(s for s, _ in v), statistics.median(r for _, r in v)) for k, v in rows.items()}
d, b = m["direct"], m["behind"]
print(f"server_2026.py, SDK Client mode '"$mode"': start to first answer {d[0]*1e3:.1f} ms direct, {b[0]*1e3:.1f} ms behind ({b[0]/d[0]:.2f}x); tools/call round trip {d[1]*1e6:.0f} us direct, {b[1]*1e6:.0f} us behind ({b[1]/d[1]:.2f}x)")
'
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
