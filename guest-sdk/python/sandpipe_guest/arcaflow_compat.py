"""Unchanged Arcaflow plugins (``arcaflow-plugin-sdk`` from PyPI) as componentize-py components.

    python3 -m sandpipe_guest.build --arcaflow plugin.py -o plugin.wasm   # see build.py
    sandpipe run --framing cbor plugin.wasm --atp

The plugin file is the one an engine runs with ``python3 plugin.py --atp``: steps,
``plugin.run(plugin.build_schema(...))``, signal handlers, ``signal.signal``. In a component
(CPython 3.14 on WASI, one thread) :func:`install` changes what that needs, and nothing else:

- ``threading.Thread.start`` runs the thread there and then, to its end, on the caller's stack
  (CPython on WASI cannot start threads); ``join`` returns at once.
- ``threading.Condition.wait`` (so ``Event.wait`` and the SDK's own waits) does not block: it
  pumps the ATP stream, running the SDK's read loop for the next messages, until it is
  notified. A signal handler that sets an ``Event`` wakes the step waiting on it this way.
- ``sys.stdout`` gets a buffered writer (``io.BufferedWriter``, which retries short writes)
  where componentize-py gives an unbuffered ``FileIO``, whose ``write`` may write less than it
  was given: cbor2 never retries.
- The SDK's schema builder evaluates forward references with no namespace, which works only
  because Python up to 3.13 kept on each the value ``typing.get_type_hints`` found; 3.14 keeps
  nothing, and the SDK fails at import. :func:`install` keeps it.
- ``plugin.run``'s defaults (``sys.argv`` and the standard streams, bound when ``plugin.py``
  was imported, which in a component is build time) are rebound at each start.

``signal.signal`` needs nothing: CPython on WASI accepts it; the handler never runs, as no
signal reaches a component (sandpipe ends it on SIGTERM itself).

What cannot work with one thread:

- A wait's timeout is only noticed when the next message arrives: nothing runs while the
  plugin waits for input, so ``Event.wait(5)`` returns after 5 s only if the engine writes
  something after that.
- Overlapping steps finish last in, first out. A step that waits pumps the stream; a step
  started meanwhile runs on top of it and must end (or wait in turn) before the first can go
  on, even if its signal came first.
- A wait that nothing can end any more (the engine sent client done, or the input ended)
  raises :class:`WouldBlockForever` in the step, which the SDK reports as the step's error;
  with real threads the plugin would hang until it was killed.
- ``time.sleep`` and blocking calls in a step hold up every other run.
"""

import io
import sys
import threading
import time
import types
import typing

__all__ = ["WouldBlockForever", "install", "run_main"]


class WouldBlockForever(RuntimeError):
    """A wait that nothing can end: one thread, and no message left to wait for."""


class _Resume(BaseException):
    """Unwinds a nested ATP read loop back to the wait that started it (a BaseException, so
    the SDK's ``except Exception`` lets it through)."""


class Thread(threading.Thread):
    """A thread that runs when it is started, to its end, on the starter's stack."""

    _sp_state = "new"

    def start(self):
        if self._sp_state != "new":
            raise RuntimeError("threads can only be started once")
        self._sp_state = "running"
        try:
            self.run()
        except BaseException:  # as in a thread: reported by the hook, the starter goes on
            threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), self)))
        finally:
            self._sp_state = "done"

    def is_alive(self):
        return self._sp_state == "running"

    def join(self, timeout=None):
        if self._sp_state == "new":
            raise RuntimeError("cannot join thread before it is started")
        _wait_until(lambda: self._sp_state == "done", timeout)


def _condition_wait(self, timeout=None):
    """``threading.Condition.wait`` with the blocking acquire replaced by pumping the stream."""
    if not self._is_owned():
        raise RuntimeError("cannot wait on un-acquired lock")
    waiter = threading.Lock()
    waiter.acquire()  # notify() releases it
    self._waiters.append(waiter)
    saved = self._release_save()
    try:
        return _wait_until(lambda: not waiter.locked(), timeout)
    finally:
        self._acquire_restore(saved)
        if waiter.locked() and waiter in self._waiters:
            self._waiters.remove(waiter)


_server = None  # the running arcaflow_plugin_sdk.atp.ATPServer


def _wait_until(ready, timeout):
    if ready():
        return True
    if timeout is not None and timeout <= 0:
        return False
    if _server is None:
        raise WouldBlockForever("this wait would block forever: no ATP stream to pump")
    if not isinstance(_server.decoder, _Pump):
        _server.decoder = _Pump(_server.decoder)
    deadline = None if timeout is None else time.monotonic() + timeout
    return _server.decoder.run_until(_server, ready, deadline)


class _Pump:
    """The ATP server's decoder, shared by its read loop and the loops nested in waits."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.waits = []
        self.ended = False

    def decode(self):
        if self.waits:
            ready, deadline = self.waits[-1]
            if ready() or (deadline is not None and time.monotonic() >= deadline):
                raise _Resume
        if self.ended:  # every read loop below the one that ended ends the same way
            return {"id": 4, "run_id": "", "data": {}}  # client done
        return self.decoder.decode()

    def run_until(self, server, ready, deadline):
        self.waits.append((ready, deadline))
        try:
            server.run_server_read_loop()
        except _Resume:
            return ready()
        finally:
            self.waits.pop()
        self.ended = True  # client done, end of input, or a fatal error
        if ready() or deadline is not None:
            return ready()
        raise WouldBlockForever("this wait can never end: the ATP stream has ended")


def _cache_forward_refs():
    """Python up to 3.13 kept on a ``ForwardRef`` the value ``typing.get_type_hints`` found for
    it, and the SDK's schema builder relies on that: it evaluates forward references again with
    no namespace. 3.14 keeps nothing, so the SDK fails at import. Keep it here."""
    evaluate = typing.evaluate_forward_ref
    found = {}  # id(ref) -> (ref, value)

    def evaluate_forward_ref(ref, *, globals=None, locals=None, owner=None, **kw):
        if globals is None and locals is None and owner is None and id(ref) in found:
            return found[id(ref)][1]
        value = evaluate(ref, globals=globals, locals=locals, owner=owner, **kw)
        found[id(ref)] = (ref, value)
        return value

    typing.evaluate_forward_ref = evaluate_forward_ref


def install():
    """Patch ``threading``, ``sys.stdout`` and the SDK for a component; import the SDK."""
    threading.Thread = Thread
    threading.Condition.wait = _condition_wait
    if isinstance(sys.stdout.buffer, io.RawIOBase):
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(sys.stdout.buffer), "utf-8", line_buffering=True)
    if sys.version_info >= (3, 14):
        _cache_forward_refs()
    from arcaflow_plugin_sdk import atp, plugin  # noqa: F401  (atp: plugin.run imports it late)

    sdk_run_plugin = atp.ATPServer.run_plugin

    def run_plugin(self, plugin_schema):
        global _server
        _server = self
        try:
            return sdk_run_plugin(self, plugin_schema)
        finally:
            _server = None

    atp.ATPServer.run_plugin = run_plugin


def prepare(module):
    """At build time: the plugin's code, run once as ``module`` so that everything it imports
    is imported (componentize-py keeps only what the build imported)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    code = spec.loader.get_code(module)
    exec(code, types.ModuleType(module).__dict__)
    return code


def run_main(code, argv):
    """At each start: run the plugin's code as ``__main__`` with ``argv`` (the program name
    first), as ``python3 plugin.py ARGS`` does."""
    from arcaflow_plugin_sdk import plugin

    sys.argv = list(argv)
    plugin.run.__defaults__ = (tuple(sys.argv), sys.stdin, sys.stdout, sys.stderr)
    main = types.ModuleType("__main__")
    main.__file__ = code.co_filename
    sys.modules["__main__"] = main
    exec(code, main.__dict__)
