#!/usr/bin/env bash
# Set up (Rust targets, build) and show sandpipe's main job: a sandboxed plugin answering,
# then each limit biting. Safe to run again; the second run skips the builds.
set -uo pipefail
cd "$(dirname "$0")"

rustup target add wasm32-wasip2 wasm32-wasip1 >/dev/null
echo "== building sandpipe and the plugins (the first build takes several minutes: wasmtime is big)"
cargo build --quiet -p sandpipe || exit 1
TARGET="${CARGO_TARGET_DIR:-target}"
PLUGINS="$TARGET/plugins"
for t in wasm32-wasip2 ""; do
  cargo build --quiet --release -p sandpipe-example-echo -p sandpipe-test-plugins \
    -p sandpipe-example-oracle -p sandpipe-example-orchard -p sandpipe-example-denobridge \
    -p sandpipe-example-atp -p sandpipe-example-finecode \
    --target-dir "$PLUGINS" ${t:+--target "$t"} || exit 1
done
# A component that exports functions (MCP tools), not a command: wasm only.
cargo build --quiet --release -p sandpipe-example-mcp-tools --target-dir "$PLUGINS" \
  --target wasm32-wasip2 || exit 1
SANDPIPE="$TARGET/debug/sandpipe"
WASM="$PLUGINS/wasm32-wasip2/release"
NATIVE="$PLUGINS/release"

show() { # show "stdin" args...
  local input=$1; shift
  echo
  echo "\$ printf '${input//$'\n'/\\n}' | sandpipe $(printf '%q ' "$@")"
  printf '%s' "$input" | "$SANDPIPE" "$@"
  echo "[exit status $?]"
}

echo
echo "== a plugin compiled to a WASI component answers over JSON Lines, sandboxed"
show $'{"jsonrpc":"2.0","id":1,"method":"ping"}\n' run --framing lines "$WASM/echo-lines.wasm"
echo
echo "== the same source built natively, behind the same API: a real process in the native sandbox"
echo "   (its own namespaces, a seccomp allow-list, Landlock and a cgroup where the kernel gives them)"
show $'{"jsonrpc":"2.0","id":1,"method":"ping"}\n' run --framing lines "$NATIVE/echo-lines"

echo
echo "== limits that bite"
show "" run --framing lines --fuel 50000000 "$WASM/spin.wasm"
show "" run --framing lines --max-memory 32MiB "$WASM/alloc.wasm"
show "" run --framing lines --timeout 1s "$WASM/sleep-stdin.wasm"
show "" run --framing lines "$WASM/trap-mid-frame.wasm"
show "" run --framing lines "$WASM/junk.wasm"

DIR=$(mktemp -d)
echo "hello" > "$DIR/hello.txt"
echo
echo "== filesystem: only --dir is visible, and :ro is read-only (host dir: $DIR)"
show "" run --framing lines --dir "$DIR::/data:ro" "$WASM/fs.wasm" -- \
  read:/data/hello.txt write:/data/hello.txt read:/data/../../etc/passwd read:/etc/passwd
echo "host file still says: $(cat "$DIR/hello.txt")"
rm -rf "$DIR"

WEB=$(mktemp -d)
echo "hello from a server on loopback" > "$WEB/hello.txt"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$WEB" "$PORT" >/dev/null 2>&1 &
SERVER=$!
python3 - "$PORT" <<'WAIT'
import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()
        break
    except OSError:
        time.sleep(0.05)
WAIT
echo
echo "== network: none unless --allow-net names it; sandpipe resolves, checks and pins each name"
echo "   (both names are pinned to a server on 127.0.0.1:$PORT; only allowed.test is on the list)"
show "\"get http://allowed.test:$PORT/hello.txt\"
\"get http://refused.test:$PORT/hello.txt\"
" run --framing lines --allow-net "allowed.test:$PORT" \
  --resolve allowed.test=127.0.0.1 --resolve refused.test=127.0.0.1 "$WASM/http-client.wasm"
if command -v curl >/dev/null; then
  echo
  echo "== the same list for a native plugin: curl in its own network namespace, through sandpipe's proxy"
  show "" run --allow-net "allowed.test:$PORT" --resolve allowed.test=127.0.0.1 \
    --resolve refused.test=127.0.0.1 "$(command -v curl)" -sS \
    "http://allowed.test:$PORT/hello.txt" "http://refused.test:$PORT/hello.txt"
fi
kill "$SERVER" 2>/dev/null
rm -rf "$WEB"

echo
echo "== protocols: one call each, sandboxed"
show "" call --protocol oracle --method sqrt --params '["0x10"]' "$WASM/example-oracle.wasm"
show "" call --protocol orchard --method execute --params '{"action":"sum","attrs":{"values":[1,2,3]}}' "$WASM/example-orchard.wasm"
show "" call --protocol atp --method greet --params '{"name":"sandpipe"}' "$WASM/example-atp.wasm"
show "" call --protocol oracle --fuel 100000000 --method spin "$WASM/oracle-hog.wasm"
echo
echo "== MCP: a component's exported functions served as tools, one tools/call"
show "" call --protocol mcp --method tools/call --params '{"name":"add","arguments":{"a":2,"b":40}}' \
  "$WASM/sandpipe_example_mcp_tools.wasm"

REC=$(mktemp -d)
echo
echo "== record, replay, serve"
show "" call --protocol oracle --deterministic --record "$REC/s.transcript" --method add --params '["0x2","0x3"]' "$WASM/example-oracle.wasm"
show "" replay "$REC/s.transcript" --plugin "$WASM/example-oracle.wasm"
show "" replay "$REC/s.transcript" --plugin "$WASM/oracle-hog.wasm"
rm -rf "$REC"

echo
echo "== done. Exit codes: sandpipe run --help"
