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
echo "== the same source built natively, behind the same API (not sandboxed, and it says so)"
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

echo
echo "== protocols: one call each, sandboxed"
show "" call --protocol oracle --method sqrt --params '["0x10"]' "$WASM/example-oracle.wasm"
show "" call --protocol orchard --method execute --params '{"action":"sum","attrs":{"values":[1,2,3]}}' "$WASM/example-orchard.wasm"
show "" call --protocol atp --method greet --params '{"name":"sandpipe"}' "$WASM/example-atp.wasm"
show "" call --protocol oracle --fuel 100000000 --method spin "$WASM/oracle-hog.wasm"

REC=$(mktemp -d)
echo
echo "== record, replay, serve"
show "" call --protocol oracle --deterministic --record "$REC/s.transcript" --method add --params '["0x2","0x3"]' "$WASM/example-oracle.wasm"
show "" replay "$REC/s.transcript" --plugin "$WASM/example-oracle.wasm"
show "" replay "$REC/s.transcript" --plugin "$WASM/oracle-hog.wasm"
rm -rf "$REC"

echo
echo "== done. Exit codes: sandpipe run --help"
