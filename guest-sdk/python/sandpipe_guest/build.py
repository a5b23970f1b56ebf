"""Build a Python plugin into a WASI component (componentize-py) or a one-file native zipapp.

    python3 -m sandpipe_guest.build PLUGIN.py -o plugin.wasm         # the component
    python3 -m sandpipe_guest.build PLUGIN.py --native -o plugin.pyz  # the same plugin for python3
    python3 -m sandpipe_guest.build --arcaflow PLUGIN.py -o plugin.wasm  # an Arcaflow SDK plugin

``PLUGIN.py`` defines ``main()``, which serves the protocol (see ``examples/python/``). The
build copies the plugin, this SDK and the directories given with ``--path`` into a scratch
directory, adds an entry module, and runs componentize-py (found next to this Python, on
``PATH`` or in ``$COMPONENTIZE_PY``) with the world in ``guest-sdk/python/wit``: a
``wasi:cli`` command, so ``sandpipe run plugin.wasm`` runs it like any other plugin. The
zipapp carries the same files and a ``#!`` line (default ``/usr/bin/env python3``), so the
native build is one file: sandpipe's native mode (Landlock) lets a plugin read its own file.

With ``--arcaflow``, ``PLUGIN.py`` is an unchanged Arcaflow plugin (``arcaflow-plugin-sdk``,
run by an engine as ``python3 PLUGIN.py --atp``): the build bundles the SDK and the pure-Python
part of its dependencies (cbor2, PyYAML) from the Python running it, and the component runs the
plugin file as ``__main__`` at each start behind ``sandpipe_guest.arcaflow_compat``.

Uncaught exceptions end the plugin with status 2 and one line on stderr (see ``wasi.main``).
"""

import argparse
import os
import re
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


_ARCAFLOW_COMPONENT_ENTRY = """\
from wit_world import exports
from sandpipe_guest import arcaflow_compat, wasi

arcaflow_compat.install()
_code = arcaflow_compat.prepare("{module}")


class Run(exports.Run):
    def run(self) -> None:
        argv = ["{module}.py", *wasi.argv()]
        wasi.main(lambda: arcaflow_compat.run_main(_code, argv))
"""

_ARCAFLOW_NATIVE_ENTRY = """\
import runpy

runpy.run_module("{module}", run_name="__main__", alter_sys=True)
"""

ARCAFLOW_SDK = "arcaflow-plugin-sdk"


def distribution_paths(name, seen=None):
    """The top-level packages and modules of the installed distribution ``name`` and of what it
    requires, compiled extensions left out (a component has none; the packages here fall back
    to pure Python)."""
    from importlib import metadata

    seen = set() if seen is None else seen
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        sys.exit(f"sandpipe_guest.build: {name} is not installed for {sys.executable}")
    if dist.metadata["Name"].lower() in seen:
        return []
    seen.add(dist.metadata["Name"].lower())
    paths = []
    for f in dist.files or []:
        top = f.parts[0]
        if top in ("..", "__pycache__") or top.endswith(".dist-info") or top.endswith((".so", ".pyd")):
            continue
        if len(f.parts) > 1 or top.endswith(".py"):
            path = str(dist.locate_file(top))
            if path not in paths:
                paths.append(path)
    for req in dist.requires or []:
        if "extra ==" not in req:
            paths += distribution_paths(re.match(r"[A-Za-z0-9._-]+", req).group(0), seen)
    return paths


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


def stage(plugin, paths, scratch, entry, template=None):
    """Copy the plugin, the SDK and ``paths`` into ``scratch``; return the entry module name."""
    module = os.path.splitext(os.path.basename(plugin))[0]
    if not module.isidentifier():
        sys.exit(f"sandpipe_guest.build: {plugin}: the file name must be a Python module name")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    shutil.copytree(SDK_DIR, os.path.join(scratch, "sandpipe_guest"), ignore=ignore)
    shutil.copy(plugin, os.path.join(scratch, module + ".py"))
    for p in paths:
        target = os.path.join(scratch, os.path.basename(os.path.normpath(p)))
        if os.path.isdir(p):
            shutil.copytree(p, target, ignore=ignore)
        else:
            shutil.copy(p, target)
    with open(os.path.join(scratch, entry + ".py"), "w") as f:
        if template is None:
            template = _COMPONENT_ENTRY if entry == "sandpipe_app" else _NATIVE_ENTRY
        f.write(template.format(module=module))


def build_component(plugin, out, paths=(), quiet=True, arcaflow=False):
    with tempfile.TemporaryDirectory(prefix="sandpipe-py-") as scratch:
        if arcaflow:
            paths = [*paths, *distribution_paths(ARCAFLOW_SDK)]
        stage(plugin, paths, scratch, "sandpipe_app", _ARCAFLOW_COMPONENT_ENTRY if arcaflow else None)
        cmd = [componentize_py(), "-d", WIT_DIR, "-w", "plugin"]
        cmd += ["componentize", "sandpipe_app", "-p", scratch, "-o", os.path.abspath(out)]
        if quiet:
            cmd.insert(1, "-q")
        subprocess.run(cmd, check=True, cwd=scratch)


def build_native(plugin, out, paths=(), python="/usr/bin/env python3", arcaflow=False):
    with tempfile.TemporaryDirectory(prefix="sandpipe-py-") as scratch:
        if arcaflow:
            paths = [*paths, *distribution_paths(ARCAFLOW_SDK)]
        stage(plugin, paths, scratch, "__main__", _ARCAFLOW_NATIVE_ENTRY if arcaflow else None)
        zipapp.create_archive(scratch, os.path.abspath(out), interpreter=python)


def main(args=None):
    ap = argparse.ArgumentParser(prog="python3 -m sandpipe_guest.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("plugin", help="the plugin's Python file (defines main(); with --arcaflow, an Arcaflow plugin)")
    ap.add_argument("-o", "--output", required=True, help="the .wasm (or, with --native, .pyz) to write")
    ap.add_argument("--native", action="store_true", help="build a one-file zipapp for python3 instead")
    ap.add_argument("--python", default="/usr/bin/env python3", help="the zipapp's interpreter line")
    ap.add_argument(
        "--arcaflow",
        action="store_true",
        help=f"an unchanged Arcaflow plugin: bundle {ARCAFLOW_SDK} and its dependencies from this Python",
    )
    ap.add_argument("--path", action="append", default=[], help="a module or package to bundle (repeatable)")
    a = ap.parse_args(args)
    if a.native:
        build_native(a.plugin, a.output, a.path, a.python, a.arcaflow)
    else:
        build_component(a.plugin, a.output, a.path, arcaflow=a.arcaflow)


if __name__ == "__main__":
    main()
