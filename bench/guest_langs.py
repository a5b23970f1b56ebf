#!/usr/bin/env python3
"""Python and JS plugins: a component under `sandpipe run` against the same plugin run natively
by its interpreter (`node`, `python3`). Process-level, as an engine sees a plugin: every figure
includes starting the process and the pipes.

    python3 bench/guest_langs.py SANDPIPE DIR [COMPILE_RUNS]

DIR holds the builds (see BENCHMARKS.md, "Python and JS plugins", for the commands):
js-orchard.{wasm,mjs}, js-denobridge.{wasm,mjs}, py-oracle.{wasm,pyz} (any missing pair is
skipped). Prints one Markdown table row per plugin and way of running it.

- size: the file.
- cold compile: `sandpipe compile` into an empty cache directory (median of COMPILE_RUNS,
  default 3).
- start to first response: spawn, send the first request (the plugin's own first frame for
  the oracle, which speaks first), read the answer; the artifact cached (median of 15).
- 100 B round trip: on a running plugin, one ~100-byte request and its answer (p50 of 500,
  after 50 unmeasured).
- every process gets only `PATH` in its environment, as sandpipe gives a native plugin (a
  `NODE_EXTRA_CA_CERTS` inherited from a shell makes `node` load a CA bundle at start: +80 ms).
- idle memory: 8 instances started and answered once, then idle 1 s; the mean proportional set
  size (PSS: shared pages divided among the processes sharing them) of one instance's process
  tree, and the mean resident set.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SANDPIPE = os.path.abspath(sys.argv[1])
DIR = os.path.abspath(sys.argv[2])
CACHE = tempfile.mkdtemp(prefix="sandpipe-bench-cache-")
STATE = tempfile.mkdtemp(prefix="sandpipe-bench-state-")
COMPILE_RUNS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
ENV = {"PATH": "/usr/bin:/bin"}


def pad(n):
    return "x" * n


def sized(make, size=100):
    """A request from make(padding) whose line (newline included) is `size` bytes."""
    base = len(make("")) + 1
    return make(pad(max(0, size - base)))


PLUGINS = {
    "js-orchard": {
        "first": '{"id":1,"method":"describe","params":{}}',
        "rt": sized(lambda p: '{"id":2,"method":"execute","params":{"action":"echo","attrs":{"p":"%s"}}}' % p),
        "args": [],
        "wasm_flags": [],
    },
    "js-denobridge": {
        "first": '{"jsonrpc":"2.0","id":0,"method":"health"}',
        "rt": sized(
            lambda p: '{"jsonrpc":"2.0","id":1,"method":"modifyPlan","params":{"planType":"create","nextProps":{"p":"%s"}}}' % p
        ),
        "args": ["/state"],
        "native_args": [STATE],
        "wasm_flags": ["--dir", f"{STATE}::/state"],
    },
    "py-oracle": {
        "first": None,  # the oracle speaks first: `ready`
        "ready_answer": '{"jsonrpc":"2.0","id":0,"result":{}}',
        "rt": sized(lambda p: '{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"selector":"add","calldata":["0x1"],"p":"%s"}}' % p),
        "args": [],
        "wasm_flags": [],
    },
}

NATIVE_EXT = {"js": ".mjs", "py": ".pyz"}
INTERPRETER = {"js": "/usr/bin/node", "py": "/usr/bin/python3"}


def commands(name, spec):
    lang = name.split("-")[0]
    wasm = os.path.join(DIR, name + ".wasm")
    native = os.path.join(DIR, name + NATIVE_EXT[lang])
    if not (os.path.exists(wasm) and os.path.exists(native)):
        return None
    run = [SANDPIPE, "run", "--framing", "lines", "--cache-dir", CACHE]
    return {
        "wasm": wasm,
        "ways": [
            ("component, `sandpipe run`", run + spec["wasm_flags"] + [wasm] + spec["args"]),
            (f"`{os.path.basename(INTERPRETER[lang])}` directly", [INTERPRETER[lang], native] + spec.get("native_args", spec["args"])),
            ("native file, `sandpipe run`", run + ["--dir", STATE] + [native] + spec.get("native_args", spec["args"])),
        ],
    }


class Proc:
    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0, env=ENV)

    def send(self, line):
        self.p.stdin.write(line.encode() + b"\n")

    def line(self):
        out = self.p.stdout.readline()
        if not out:
            raise RuntimeError("plugin ended")
        return out

    def close(self):
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def handshake(proc, spec):
    if spec["first"] is None:
        proc.line()  # ready
        proc.send(spec["ready_answer"])
    else:
        proc.send(spec["first"])
        proc.line()


def start_time(cmd, spec, n=15):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        proc = Proc(cmd)
        if spec["first"] is None:
            proc.line()
        else:
            proc.send(spec["first"])
            proc.line()
        times.append(time.perf_counter() - t0)
        if spec["first"] is None:
            proc.send(spec["ready_answer"])
        proc.close()
    return statistics.median(times)


def round_trip(cmd, spec, n=500, warm=50):
    proc = Proc(cmd)
    handshake(proc, spec)
    times = []
    for i in range(n + warm):
        t0 = time.perf_counter()
        proc.send(spec["rt"])
        proc.line()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    proc.close()
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)]


def tree(pid):
    out = [pid]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [c for kid in f.read().split() for c in tree(int(kid))]
        except OSError:
            pass
    return out


def pss_rss(pid):
    pss = rss = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return pss, rss


def idle_memory(cmd, spec, n=8):
    procs = [Proc(cmd) for _ in range(n)]
    for proc in procs:
        handshake(proc, spec)
    time.sleep(1)
    figures = [pss_rss(proc.p.pid) for proc in procs]
    for proc in procs:
        proc.close()
    return statistics.mean(f[0] for f in figures), statistics.mean(f[1] for f in figures)


def cold_compile(wasm, n=COMPILE_RUNS):
    times = []
    for _ in range(n):
        cache = tempfile.mkdtemp(prefix="sandpipe-bench-cold-")
        t0 = time.perf_counter()
        subprocess.run([SANDPIPE, "compile", "--cache-dir", cache, wasm], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
        shutil.rmtree(cache)
    return statistics.median(times)


def mib(b):
    return f"{b / (1 << 20):.1f} MiB" if b >= 1 << 20 else f"{b / 1024:.1f} KiB"


def ms(s):
    return f"{s * 1000:.1f} ms" if s >= 0.001 else f"{s * 1e6:.0f} µs"


def main():
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]}", file=sys.stderr)
    print("| plugin | way | file size | cold compile | start to first response (median) | 100 B round trip p50 (p99) | idle memory per instance: PSS (RSS) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, spec in PLUGINS.items():
        c = commands(name, spec)
        if c is None:
            print(f"{name}: builds missing in {DIR}, skipped", file=sys.stderr)
            continue
        compile_s = cold_compile(c["wasm"])
        # Fill the run cache once.
        subprocess.run([SANDPIPE, "compile", "--cache-dir", CACHE, c["wasm"]], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for way, cmd in c["ways"]:
            plugin = [a for a in cmd if a.startswith(DIR)][0]
            size = os.path.getsize(plugin)
            start = start_time(cmd, spec)
            p50, p99 = round_trip(cmd, spec)
            pss, rss = idle_memory(cmd, spec)
            compiled = ms(compile_s) if plugin.endswith(".wasm") else "—"
            print(f"| {name} | {way} | {mib(size)} | {compiled} | {ms(start)} | {ms(p50)} ({ms(p99)}) | {mib(pss)} ({mib(rss)}) |", flush=True)
    print(f"load average after: {open('/proc/loadavg').read().split()[:3]}", file=sys.stderr)


if __name__ == "__main__":
    main()
