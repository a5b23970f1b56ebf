// Fetch each URL with Deno's fetch and print one JSON line per URL (a real Deno program).
//
//     deno run -q --allow-net --allow-env fetch.ts URL...
//
// Deno's fetch honours HTTP_PROXY and HTTPS_PROXY, and DENO_CERT for an extra CA.
for (const url of Deno.args) {
  try {
    const r = await fetch(url);
    console.log(JSON.stringify({
      url,
      status: r.status,
      body: await r.text(),
      refused: r.headers.get("x-sandpipe-refused"),
    }));
  } catch (e) {
    console.log(JSON.stringify({ url, error: String(e) }));
  }
}
