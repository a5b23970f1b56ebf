"""An example Arcaflow plugin in Python: the same steps, schema and answers as the Rust
``examples/atp`` (so it replays ``tests/transcripts/atp/``), ATP v3 or v1 with ``--v1``.

- ``greet``, config ``{"name": text, "defer": bool}``: output ``success``
  ``{"message": "Hello, <name>!"}``; an empty name gives the declared error output ``error``;
  a config without a text name fails with an ATP error message. With ``"defer": true`` the
  run stays pending and finishes right after the next frame from the host.
- ``wait``: sends signal ``ready`` at once, then finishes when signal ``go`` arrives, with
  output ``success`` ``{"received": <the signal's data>}``.

Build:  python3 -m sandpipe_guest.build examples/python/example_atp.py -o example-atp.wasm
        (run from guest-sdk/python, or with it on PYTHONPATH)
Run:    sandpipe call --protocol atp --method greet --params '{"name": "Ada"}' example-atp.wasm
Native: PYTHONPATH=guest-sdk/python python3 examples/python/example_atp.py
"""

from sandpipe_guest import atp, wasi
from sandpipe_guest.atp import PENDING, Failed, Output


class Example(atp.Plugin):
    def __init__(self):
        self.deferred = {}  # run id -> name

    def start(self, run, step_id, config):
        if step_id == "greet":
            config = config if isinstance(config, dict) else {}
            name = config.get("name")
            if not isinstance(name, str):
                return Failed("greet: config needs a text name")
            if name == "":
                return Output("error", {"reason": "name must not be empty"})
            if config.get("defer") is True:
                self.deferred[run.id] = name
                return PENDING
            return greeting(name)
        run.signal("ready", {})
        return PENDING

    def signal(self, run, signal_id, data):
        if signal_id == "go":
            return Output("success", {"received": data})
        return PENDING

    def poll(self, run):
        name = self.deferred.pop(run.id, None)
        return PENDING if name is None else greeting(name)


def greeting(name):
    return Output("success", {"message": f"Hello, {name}!"})


def scope(id, props):
    return {"root": id, "objects": {id: {"id": id, "properties": props}}}


def schema():
    text = {"type": {"type_id": "string"}, "required": True}
    greet = {
        "id": "greet",
        "input": scope(
            "GreetInput", {"name": text, "defer": {"type": {"type_id": "bool"}, "required": False}}
        ),
        "outputs": {
            "success": {"schema": scope("Greeting", {"message": text})},
            "error": {"error": True, "schema": scope("Failure", {"reason": text})},
        },
    }
    wait = {
        "id": "wait",
        "input": scope("WaitInput", {}),
        "outputs": {"success": {"schema": scope("Received", {"received": {"type": {"type_id": "any"}}})}},
        # The Arcaflow engine refuses a signal without a data schema (as examples/atp).
        "signal_handlers": {"go": {"id": "go", "data_schema": scope("Go", {})}},
        "signal_emitters": {"ready": {"id": "ready", "data_schema": scope("Ready", {})}},
    }
    return {"steps": {"greet": greet, "wait": wait}}


def main():
    args = wasi.argv()
    if args not in ([], ["--v1"]):
        raise ValueError(f"unknown arguments {args} (only --v1)")
    atp.serve(Example(), schema(), atp.V1 if args else atp.V3)


if __name__ == "__main__":
    wasi.main(main)
