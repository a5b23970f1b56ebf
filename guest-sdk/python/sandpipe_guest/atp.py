"""Arcaflow plugins (ATP v3, or v1): subclass :class:`Plugin`, call :func:`serve`.

A wasm guest has one thread, so runs are served one frame at a time, yet several runs can be
in flight, cooperatively: a handler returns :data:`PENDING` to keep a run open and finishes it
later from :meth:`Plugin.signal` or :meth:`Plugin.poll`. The order is deterministic and the
same as the Rust SDK's (``sandpipe_guest::atp``):

    frame from the host ──► events, in order:
         work start ──► Plugin.start(run, step_id, config)   ─┐
         signal     ──► Plugin.signal(run, signal_id, data)   ├─► PENDING | Output | Failed
    then, for every run that was pending BEFORE this frame,  ─┘  (signals the run queued go
         in start order ──► Plugin.poll(run)                        out first, then its result)
    then every queued frame is written; the loop ends when the session is over (v3: client
    done and no run in flight; v1: the output is sent) or stdin closes.

A work start for a step the schema does not declare, or for a run id already in flight, is
answered with an ATP error message (step fatal). A signal for a run not in flight is reported
on stderr and ignored. :class:`Failed` becomes an error message (step fatal, not server
fatal); v1 has no error message, so there it raises :class:`AtpError` (exit non-zero).
"""

import sys

from . import cbor
from .framing import CBOR
from .oracle import _debug as _quote
from .stdio import stdio

__all__ = ["Plugin", "Run", "Output", "Failed", "PENDING", "AtpError", "serve", "V1", "V3"]

V1 = 1
V3 = 3

WORK_START, WORK_DONE, SIGNAL, CLIENT_DONE, ERROR = 1, 2, 3, 4, 5


class AtpError(ValueError):
    """A frame or call the protocol does not allow; the loop ends with it."""


class _Pending:
    __slots__ = ()

    def __repr__(self):
        return "PENDING"


PENDING = _Pending()
"""A handler's answer: the run stays in flight."""


class Output:
    """A handler's answer: the run finished with one of its declared outputs."""

    __slots__ = ("output_id", "output_data", "debug_logs")

    def __init__(self, output_id, output_data, debug_logs=""):
        self.output_id = output_id
        self.output_data = output_data
        self.debug_logs = debug_logs

    def members(self):
        return {"output_id": self.output_id, "output_data": self.output_data, "debug_logs": self.debug_logs}


class Failed:
    """A handler's answer: the run failed outside its declared outputs."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


class Run:
    """The run a handler call is about; signals sent here go out before the call's result."""

    __slots__ = ("id", "_signals")

    def __init__(self, run_id):
        self.id = run_id
        self._signals = []

    def signal(self, signal_id, data):
        """Send a signal from this run to the host (v3 only)."""
        self._signals.append((signal_id, data))


class Plugin:
    """An ATP plugin's steps. The schema is given to :func:`serve`."""

    def start(self, run, step_id, config):
        """A run of ``step_id`` (declared in the schema) starts."""
        raise NotImplementedError

    def signal(self, run, signal_id, data):
        """A signal for a pending run; ignored by default."""
        return PENDING

    def poll(self, run):
        """Called for every run that was pending before the frame just handled."""
        return PENDING


def _message(kind, run_id, data):
    return cbor.encode({"id": kind, "run_id": run_id, "data": data})


def _text(members, key, what):
    v = members.get(key)
    if v is None:
        raise AtpError(f"bad message: {what} has no {key}")
    if not isinstance(v, str):
        raise AtpError(f"bad message: {what}: {key} is not text")
    return v


class _Server:
    """The plugin side of ATP as a machine: frames in, frames out (the Rust AtpServer)."""

    def __init__(self, version, schema):
        self.version = version
        self.schema = schema
        steps = schema.get("steps") if isinstance(schema, dict) else None
        self.steps = set(k for k in steps if isinstance(k, str)) if isinstance(steps, dict) else set()
        self.state = "await start item"
        self.runs = set()
        self.transmit = []

    def hello(self):
        if self.version == V3:
            return cbor.encode({"version": 3, "schema": self.schema})
        members = {"version": 1}
        if isinstance(self.schema, dict):
            members.update(self.schema)
        else:
            members["steps"] = self.schema
        return cbor.encode(members)

    def finished(self):
        return (self.state == "client done" and not self.runs) or self.state == "v1 finished"

    def handle(self, frame):
        """Feed one frame; return events ``(kind, run_id, a, b)``."""
        try:
            value = cbor.decode(frame)
        except cbor.CborError as e:
            raise AtpError(f"invalid CBOR: {e}") from None
        if self.state == "await start item":
            self.transmit.append(self.hello())
            self.state = "serving"
            return []
        if self.state != "serving":
            raise AtpError(f"unexpected a frame while {self.state}")
        if not isinstance(value, dict):
            raise AtpError("bad message: message is not a map")
        if self.version == V1:
            if self.runs:
                raise AtpError("unexpected a second v1 frame while serving")
            step_id = _text(value, "id", "v1 start work")
            if step_id not in self.steps:
                raise AtpError(f"unknown step {step_id!r}")
            self.runs.add("")
            self.transmit.append(cbor.encode({"status": "started"}))
            return [(WORK_START, "", step_id, value.get("config"))]
        kind = value.get("id")
        if not isinstance(kind, int) or isinstance(kind, bool):
            raise AtpError("bad message: message has no integer id")
        if kind == CLIENT_DONE:
            self.state = "client done"
            return []
        run_id = _text(value, "run_id", "message")
        data = value.get("data")
        if not isinstance(data, dict):
            raise AtpError("bad message: message has no data map")
        if kind == WORK_START:
            step_id = _text(data, "id", "work start")
            if run_id in self.runs:
                refusal = f"run {_quote(run_id)} is already in flight"
            elif step_id not in self.steps:
                refusal = f"unknown step {_quote(step_id)}"
            else:
                self.runs.add(run_id)
                return [(WORK_START, run_id, step_id, data.get("config"))]
            self.transmit.append(
                _message(ERROR, run_id, {"error": refusal, "step_fatal": True, "server_fatal": False})
            )
            return []
        if kind == SIGNAL:
            signal_id = _text(data, "signal_id", "signal")
            if run_id not in self.runs:
                print(f"atp: ignoring a frame: unknown run {_quote(run_id)}", file=sys.stderr)
                return []
            return [(SIGNAL, run_id, signal_id, data.get("data"))]
        if kind in (WORK_DONE, ERROR):
            raise AtpError(f"unexpected {'work done' if kind == WORK_DONE else 'error'} from the host")
        raise AtpError(f"bad message: unknown message id {kind}")

    def settle(self, run, progress):
        """Queue a run's signals and result."""
        for signal_id, data in run._signals:
            if self.version != V3:
                raise AtpError("signal is not part of atp version 1")
            self.transmit.append(_message(SIGNAL, run.id, {"signal_id": signal_id, "data": data}))
        if progress is PENDING:
            return
        self.runs.discard(run.id)
        if isinstance(progress, Output):
            if self.version == V3:
                self.transmit.append(_message(WORK_DONE, run.id, progress.members()))
            else:
                self.transmit.append(cbor.encode(progress.members()))
                self.state = "v1 finished"
        elif isinstance(progress, Failed):
            if self.version != V3:
                raise AtpError(str(progress.error))
            self.transmit.append(
                _message(ERROR, run.id, {"error": str(progress.error), "step_fatal": True, "server_fatal": False})
            )
        else:
            raise TypeError(f"a handler returned {progress!r}; expected PENDING, Output or Failed")


def serve(plugin, schema, version=V3, io=None):
    """Serve ``plugin`` with ``schema`` (a dict with a ``steps`` member) until the session ends."""
    io = io or stdio(CBOR)
    server = _Server(version, schema)
    pending = []  # run ids in start order
    while True:
        frame = io.recv()
        if frame is None:
            return
        before = list(pending)
        for kind, run_id, a, b in server.handle(frame):
            run = Run(run_id)
            if kind == WORK_START:
                progress = plugin.start(run, a, b)
            else:
                progress = plugin.signal(run, a, b)
            _settle(server, pending, run, progress)
        for run_id in before:
            if run_id in pending:
                run = Run(run_id)
                _settle(server, pending, run, plugin.poll(run))
        while server.transmit:
            io.send(server.transmit.pop(0))
        if server.finished():
            return


def _settle(server, pending, run, progress):
    server.settle(run, progress)
    if progress is PENDING:
        if run.id not in pending:
            pending.append(run.id)
    elif run.id in pending:
        pending.remove(run.id)
