"""arcaflow_compat's threads and waits under python3, against a stand-in for the SDK's ATP
server (the real SDK, in a component, is tests/tests/arcaflow_unchanged.rs)."""

import threading
import unittest

from sandpipe_guest import arcaflow_compat as compat


class Server:
    """The shape of arcaflow_plugin_sdk.atp.ATPServer the shim relies on: ``decoder`` and a
    read loop that calls ``decoder.decode()`` per message and returns at client done."""

    def __init__(self, messages, handlers):
        self.decoder = self
        self.messages = list(messages)
        self.handlers = handlers
        self.read = []

    def decode(self):
        if not self.messages:
            return {"id": 4}  # as if the engine said client done
        msg = self.messages.pop(0)
        self.read.append(msg)
        return {"id": 1, "run_id": msg}

    def run_server_read_loop(self):
        while True:
            msg = self.decoder.decode()
            if msg["id"] == 4:
                return
            threading.Thread(target=self.handlers[msg["run_id"]]).start()


class CompatTest(unittest.TestCase):
    def setUp(self):
        self.saved = threading.Thread, threading.Condition.wait
        threading.Thread = compat.Thread
        threading.Condition.wait = compat._condition_wait

    def tearDown(self):
        threading.Thread, threading.Condition.wait = self.saved
        compat._server = None

    def test_a_thread_runs_when_started_and_its_exception_goes_to_the_hook(self):
        ran = []
        t = threading.Thread(target=lambda: ran.append(1))
        t.start()
        self.assertEqual(ran, [1])
        t.join()
        seen = []
        saved, threading.excepthook = threading.excepthook, lambda args: seen.append(args.exc_type)
        try:
            threading.Thread(target=lambda: 1 / 0).start()
        finally:
            threading.excepthook = saved
        self.assertEqual(seen, [ZeroDivisionError])

    def test_a_wait_pumps_messages_until_it_is_notified(self):
        done = threading.Event()
        compat._server = Server(["other", "signal", "after"], {"other": lambda: None, "signal": done.set})
        self.assertTrue(done.wait())
        self.assertEqual(compat._server.read, ["other", "signal"])

    def test_waits_end_last_in_first_out(self):
        first, second, order = threading.Event(), threading.Event(), []

        def wait_second():
            second.wait()
            order.append("second")

        compat._server = Server(
            ["second", "signal first", "signal second"],
            {"second": wait_second, "signal first": first.set, "signal second": second.set},
        )
        first.wait()
        order.append("first")
        self.assertEqual(order, ["second", "first"])

    def test_a_zero_timeout_does_not_pump_and_an_ended_stream_cannot_end_a_wait(self):
        compat._server = Server([], {})
        self.assertFalse(threading.Event().wait(0))
        with self.assertRaises(compat.WouldBlockForever):
            threading.Event().wait()
        compat._server = None
        with self.assertRaises(compat.WouldBlockForever):
            threading.Event().wait()


if __name__ == "__main__":
    unittest.main()
