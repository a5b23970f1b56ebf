"""Build a Python plugin into a WASI component (componentize-py) or a one-file native zipapp.

    python3 -m sandpipe_guest.build PLUGIN.py -o plugin.wasm         # the component
    python3 -m sandpipe_guest.build PLUGIN.py --native -o plugin.pyz  # the same plugin for python3

``PLUGIN.py`` defines ``main()``, which serves the protocol (see ``examples/python/``). The
build copies the plugin, this SDK and the directories given with ``--path`` into a scratch
directory, adds an entry module, and runs componentize-py (found next to this Python, on
``PATH`` or in ``$COMPONENTIZE_PY``) with the world in ``guest-sdk/python/wit``: a
``wasi:cli`` command, so ``sandpipe run plugin.wasm`` runs it like any other plugin. The
zipapp carries the same files and a ``#!`` line (default ``/usr/bin/env python3``), so the
native build is one file: sandpipe's native mode (Landlock) lets a plugin read its own file.

Uncaught exceptions end the plugin with status 2 and one line on stderr (see ``wasi.main``).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipapp

SDK_DIR = os.path.dirname(os.path.abspath(__file__))
WIT_DIR = os.path.join(os.path.dirname(SDK_DIR), "wit")

_COMPONENT_ENTRY = """\
from wit_world import exports
from sandpipe_guest import wasi
import {module}


class Run(exports.Run):
    def run(self) -> None:
        wasi.main({module}.main)
"""

_NATIVE_ENTRY = """\
from sandpipe_guest import wasi
import {module}

wasi.main({module}.main)
"""


def componentize_py():
    """The componentize-py executable to use."""
    explicit = os.environ.get("COMPONENTIZE_PY")
    if explicit:
        return explicit
    beside = os.path.join(os.path.dirname(sys.executable), "componentize-py")
    if os.path.exists(beside):
        return beside
    found = shutil.which("componentize-py")
    if found:
        return found
    sys.exit("sandpipe_guest.build: componentize-py not found (pip install componentize-py==0.25.1)")


def stage(plugin, paths, scratch, entry):
    """Copy the plugin, the SDK and ``paths`` into ``scratch``; return the entry module name."""
    module = os.path.splitext(os.path.basename(plugin))[0]
    if not module.isidentifier():
        sys.exit(f"sandpipe_guest.build: {plugin}: the file name must be a Python module name")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(SDK_DIR, os.path.join(scratch, "sandpipe_guest"), ignore=ignore)
    shutil.copy(plugin, os.path.join(scratch, module + ".py"))
    for p in paths:
        target = os.path.join(scratch, os.path.basename(os.path.normpath(p)))
        if os.path.isdir(p):
            shutil.copytree(p, target, ignore=ignore)
        else:
            shutil.copy(p, target)
    with open(os.path.join(scratch, entry + ".py"), "w") as f:
        f.write((_COMPONENT_ENTRY if entry == "sandpipe_app" else _NATIVE_ENTRY).format(module=module))


def build_component(plugin, out, paths=(), quiet=True):
    with tempfile.TemporaryDirectory(prefix="sandpipe-py-") as scratch:
        stage(plugin, paths, scratch, "sandpipe_app")
        cmd = [componentize_py(), "-d", WIT_DIR, "-w", "plugin"]
        cmd += ["componentize", "sandpipe_app", "-p", scratch, "-o", os.path.abspath(out)]
        if quiet:
            cmd.insert(1, "-q")
        subprocess.run(cmd, check=True, cwd=scratch)


def build_native(plugin, out, paths=(), python="/usr/bin/env python3"):
    with tempfile.TemporaryDirectory(prefix="sandpipe-py-") as scratch:
        stage(plugin, paths, scratch, "__main__")
        zipapp.create_archive(scratch, os.path.abspath(out), interpreter=python)


def main(args=None):
    ap = argparse.ArgumentParser(prog="python3 -m sandpipe_guest.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("plugin", help="the plugin's Python file (defines main())")
    ap.add_argument("-o", "--output", required=True, help="the .wasm (or, with --native, .pyz) to write")
    ap.add_argument("--native", action="store_true", help="build a one-file zipapp for python3 instead")
    ap.add_argument("--python", default="/usr/bin/env python3", help="the zipapp's interpreter line")
    ap.add_argument("--path", action="append", default=[], help="a module or package to bundle (repeatable)")
    a = ap.parse_args(args)
    if a.native:
        build_native(a.plugin, a.output, a.path, a.python)
    else:
        build_component(a.plugin, a.output, a.path)


if __name__ == "__main__":
    main()
