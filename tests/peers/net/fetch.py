"""Fetch each URL with urllib and print one JSON line per URL (a real Python client program).

    python3 fetch.py [--direct] [--cafile=CA.pem] URL...

urllib honours HTTP_PROXY and HTTPS_PROXY (CONNECT for https), and Python's ssl module
SSL_CERT_FILE; `--direct` ignores the proxy variables, as a program that opens its own
sockets would; `--cafile` trusts that CA alone, whatever the environment says, as a program
that pins its server's CA does.
"""

import json
import ssl
import sys
import urllib.error
import urllib.request

direct = "--direct" in sys.argv
cafile = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--cafile=")), None)
urls = [a for a in sys.argv[1:] if not a.startswith("--")]
handlers = [urllib.request.ProxyHandler({})] if direct else []
if cafile:
    handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile)))
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
