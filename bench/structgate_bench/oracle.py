"""Python ``re`` as the regex oracle, run in a subprocess with a per-call time limit.

Some corpus strings are catastrophic for a backtracking matcher (dottxt's URL samples take
seconds each in ``re``), so every ``re.fullmatch`` runs in a persistent child process; a call that
exceeds ``timeout_s`` kills the child (restarted for the next call) and yields ``None``.
"""
from __future__ import annotations

import os
import signal

__all__ = ["ReOracle"]


def _oracle_main(conn) -> None:  # pragma: no cover - runs in the child
    import re

    cache: dict[str, object] = {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        op, pattern, text = msg
        try:
            rx = cache.get(pattern)
            if rx is None:
                rx = re.compile(pattern)
                cache[pattern] = rx
        except (re.error, OverflowError, RecursionError, ValueError) as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))
            continue
        if op == "compile":
            conn.send(("ok", True))
            continue
        try:
            conn.send(("ok", rx.fullmatch(text) is not None))
        except RecursionError as e:
            conn.send(("error", f"RecursionError: {e}"))


class ReOracle:
    """``re.fullmatch`` verdicts with a time limit.

    Parameters
    ----------
    timeout_s : float
        Limit per ``fullmatch`` call, seconds.
    """

    def __init__(self, timeout_s: float = 2.0):
        self.timeout_s = timeout_s
        self.proc = None
        self.conn = None
        self.timeouts = 0

    def _start(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_oracle_main, args=(child,), daemon=True, name="structgate-re-oracle")
        self.proc.start()
        child.close()
        self.conn = parent

    def _kill(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def _ask(self, op: str, pattern: str, text: str, timeout: float):
        if self.proc is None:
            self._start()
            # warm up outside the timed call: process start + pattern compile
            self.conn.send(("compile", pattern, ""))
            if not self.conn.poll(60.0):
                self._kill()
                return ("timeout", None)
            self.conn.recv()
        self.conn.send((op, pattern, text))
        if not self.conn.poll(timeout):
            self._kill()
            self.timeouts += 1
            return ("timeout", None)
        try:
            return self.conn.recv()
        except EOFError:
            self._kill()
            return ("error", "re oracle process died")

    def verdicts(self, pattern: str, texts: list[str]) -> tuple[str | None, list[bool | None]]:
        """``(compile_error, [fullmatch(pattern, t) is not None, ...])``; ``None`` for a text whose
        call timed out or failed; all ``None`` when ``re`` cannot compile the pattern."""
        tag, val = self._ask("compile", pattern, "", max(self.timeout_s, 10.0))
        if tag != "ok":
            return (val or "timeout compiling", [None] * len(texts))
        out: list[bool | None] = []
        for t in texts:
            tag, val = self._ask("match", pattern, t, self.timeout_s)
            out.append(bool(val) if tag == "ok" else None)
        return (None, out)

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        self._kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
