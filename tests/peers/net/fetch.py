"""Fetch each URL with urllib and print one JSON line per URL (a real Python client program).

    python3 fetch.py [--direct] URL...

urllib honours HTTP_PROXY and HTTPS_PROXY (CONNECT for https), and Python's ssl module
SSL_CERT_FILE; `--direct` ignores the proxy variables, as a program that opens its own
sockets would.
"""

import json
import sys
import urllib.error
import urllib.request

direct = "--direct" in sys.argv
urls = [a for a in sys.argv[1:] if a != "--direct"]
handlers = [urllib.request.ProxyHandler({})] if direct else []
opener = urllib.request.build_opener(*handlers)
for url in urls:
    try:
        with opener.open(url, timeout=60) as r:
            out = {"url": url, "status": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        out = {
            "url": url,
            "status": e.code,
            "body": e.read().decode(),
            "refused": e.headers.get("X-Sandpipe-Refused"),
        }
    except Exception as e:  # noqa: BLE001 - the test reads the error's kind and text
        out = {"url": url, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out), flush=True)
