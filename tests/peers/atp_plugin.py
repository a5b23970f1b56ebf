#!/usr/bin/env python3
"""An Arcaflow plugin written with the real SDK (arcaflow-plugin-sdk, PyPI), for the stand-in tests.

Two steps: `greet` answers at once (and prints, which the SDK returns as debug logs);
`wait` blocks until the engine sends it the ATP signal `finish` (a signal handler). Like the
ATP specification asks, it handles SIGTERM itself: it says so on stderr and exits 0. The SDK
ignores SIGINT on purpose.

    python atp_plugin.py --atp       # what an engine runs (the podman deployer adds --atp)
"""

import signal
import sys
import threading
import typing
from dataclasses import dataclass

from arcaflow_plugin_sdk import plugin, schema


@dataclass
class GreetInput:
    name: typing.Annotated[str, schema.name("Name"), schema.description("Who to greet")]


@dataclass
class Greeting:
    message: str


@dataclass
class WaitInput:
    label: str


@dataclass
class Finished:
    label: str
    reason: str


@dataclass
class FinishSignal:
    reason: str


@plugin.step(
    id="greet",
    name="Greet",
    description="Says hello",
    outputs={"success": Greeting},
)
def greet(params: GreetInput) -> typing.Tuple[str, Greeting]:
    print(f"greeting {len(params.name)} characters")
    return "success", Greeting(message=f"Hello, {params.name}!")


class WaitStep:
    def __init__(self):
        self.finished = threading.Event()
        self.reason = ""

    @plugin.step_with_signals(
        id="wait",
        name="Wait",
        description="Waits for the finish signal",
        outputs={"finished": Finished},
        signal_handler_method_names=["finish"],
        signal_emitters=[],
        step_object_constructor=lambda: WaitStep(),
    )
    def wait(self, params: WaitInput) -> typing.Tuple[str, Finished]:
        self.finished.wait()
        return "finished", Finished(label=params.label, reason=self.reason)

    @plugin.signal_handler(
        id="finish",
        name="Finish",
        description="Ends the wait",
    )
    def finish(self, signal_input: FinishSignal):
        self.reason = signal_input.reason
        self.finished.set()


def on_sigterm(signum, frame):
    sys.__stderr__.write("atp_plugin: SIGTERM, shutting down\n")
    sys.__stderr__.flush()
    sys.exit(0)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    sys.exit(plugin.run(plugin.build_schema(greet, WaitStep.wait)))
