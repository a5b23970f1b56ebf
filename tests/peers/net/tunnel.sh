#!/bin/sh
# Fetch URL through both kinds of tunnel of sandpipe's proxy with curl (a real client
# program), printing one JSON line per tunnel with the body it got:
#   1. HTTP CONNECT: curl --proxytunnel, through $http_proxy;
#   2. SOCKS5, the name resolved by the proxy: through $ALL_PROXY (socks5h://).
# Both carry plain HTTP, so the recording holds their bytes, not an opaque TLS stream.
# A plugin's environment is sandpipe's own (no PATH): curl is named by its path. The tests'
# server answers one line of plain text, which needs no JSON escaping.
set -e
printf '{"connect":"%s"}\n' "$(/usr/bin/curl -sS --fail --proxytunnel -x "$http_proxy" "$1")"
printf '{"socks5":"%s"}\n' "$(/usr/bin/curl -sS --fail -x "$ALL_PROXY" "$1")"
