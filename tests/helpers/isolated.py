"""One interpreter for a module's isolated cases: a crash or a hang fails the case, not pytest.

A module whose cases must not take pytest down with them (native code fed corrupt input:
a crash is a signal, a hang is a loop) runs them in a child interpreter. Starting one per
case costs an interpreter start and the imports (torch, the extensions) each time; an
:class:`Interpreter` starts once per module and runs each case's body in a fresh namespace
over the module's prelude. When a case crashes the child (a negative exit code) or runs past
its timeout (the child is killed), that case fails saying so and the next case starts a new
child, so each case still fails alone.

    @pytest.fixture(scope="module")
    def isolated():
        with Interpreter(PRELUDE) as it:
            yield it

    def test_case(isolated):
        out = isolated.run('''print(decode(b"..."))''')
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# the child: the prelude once, then one JSON line per case in, one JSON line per case out on
# a private copy of fd 1 (fd 1 itself goes to stderr, so native prints cannot corrupt it)
_SERVER = r'''
import contextlib, io, json, os, sys, traceback
_proto = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
_g0 = {"__name__": "__isolated__"}
exec(compile(json.loads(sys.argv[1]), "<prelude>", "exec"), _g0)
print(json.dumps({"ready": True}), file=_proto, flush=True)
for _line in sys.stdin:
    _body = json.loads(_line)
    _buf = io.StringIO()
    _g = dict(_g0)
    try:
        with contextlib.redirect_stdout(_buf):
            exec(compile(_body, "<case>", "exec"), _g)
        _res = {"ok": True, "out": _buf.getvalue()}
    except BaseException:
        _res = {"ok": False, "out": _buf.getvalue(), "tb": traceback.format_exc()}
    print(json.dumps(_res), file=_proto, flush=True)
'''


class Interpreter:
    """A child interpreter running ``prelude`` once, then each :meth:`run`'s body."""

    def __init__(self, prelude: str = "", *, start_timeout: float = 300.0) -> None:
        self.prelude = textwrap.dedent(prelude)
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.starts = 0   # children started (1 unless a case crashed or hung)

    def __enter__(self) -> Interpreter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(self.prelude)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, cwd=REPO, env=env, text=True)
        self.starts += 1
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout, self._lines),
                         daemon=True).start()
        self._reply(self.start_timeout, "starting (the prelude)")

    @staticmethod
    def _read(stream, lines: queue.Queue) -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)   # EOF: the child exited

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-4000:]

    def _reply(self, timeout: float, what: str) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise AssertionError(f"the isolated interpreter hung {what} (killed after "
                                 f"{timeout} s)\n--- stderr\n{self._stderr_tail()}") from None
        if line is None:
            rc = self.proc.wait()
            tail = self._stderr_tail()
            self.proc = None
            raise AssertionError(
                f"the isolated interpreter exited with {rc} {what} (negative: killed by a "
                f"signal, i.e. a crash)\n--- stderr\n{tail}")
        return json.loads(line)

    def run(self, body: str, timeout: float = 300.0) -> str:
        """Run ``body`` (dedented) in a fresh namespace over the prelude's; return what it
        printed. A failed assertion or an exception fails with the child's traceback; a
        crash or a hang fails with the exit code or the timeout (a new child serves the
        next case)."""
        if self.proc is None:
            self._start()
        self.proc.stdin.write(json.dumps(textwrap.dedent(body)) + "\n")
        self.proc.stdin.flush()
        res = self._reply(timeout, "running the case")
        assert res["ok"], f"--- case output\n{res['out']}\n--- traceback\n{res['tb']}"
        return res["out"]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
