"""What differs between ``python3`` and a componentize-py component, behind two calls.

- :func:`argv`: the plugin's arguments (``sys.argv[1:]`` natively; ``wasi:cli/environment``
  in a component, whose ``sys.argv`` was fixed when the component was built).
- :func:`exit`: end the plugin with a status (a component can only say success or failure:
  every non-zero status is reported as 1, as with Rust's ``std::process::exit`` on WASI p2).
"""

import sys

__all__ = ["IN_WASM", "argv", "exit"]

IN_WASM = sys.platform == "wasi"

if IN_WASM:
    # Imported now, while componentize-py initialises the interpreter at build time: generated
    # binding modules that nothing imported then are not in the component.
    from componentize_py_types import Err, Ok
    from wit_world.imports import environment as _environment
    from wit_world.imports import exit as _wasi_exit


def argv():
    """The plugin's arguments, without the program name."""
    if IN_WASM:
        return list(_environment.get_arguments()[1:])
    return sys.argv[1:]


def exit(code=0):
    """End the plugin now with ``code`` (0 is success)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if IN_WASM:
        _wasi_exit.exit(Ok(None) if code == 0 else Err(None))
    sys.exit(code)


def main(entry):
    """Run ``entry()`` as a plugin's main: an uncaught exception is printed on stderr and ends
    the plugin with status 2 (never a trap), a return ends it with status 0."""
    try:
        entry()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        exit(code)
    except BaseException as e:  # the whole plugin: report, then fail
        name = sys.argv[0] if sys.argv and sys.argv[0] else "plugin"
        print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
        exit(2)
