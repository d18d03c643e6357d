"""structgate.worker_pool.WorkerPool: what a timeout stops, and the workers' lifetime (exit,
interrupt, a killed parent, fork). Break-it findings of 2026-12-07 (the outlines-core index pool):
a compile whose deadline passed while it waited in the queue terminated the worker running another
compile (which then failed as "worker died (memory?)" after its retries); a busy worker kept the
interpreter from exiting (minutes, or forever without a limit) and survived Ctrl-C and a killed
parent; a forked child used the parent's pool and then terminated the parent's workers."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from structgate.errors import CompileLimitError
from structgate.worker_pool import WorkerPool

from _pool_checks import sleep_job, touch_job

pytestmark = pytest.mark.timeout(180)
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


class _Pool(WorkerPool):
    _pools: dict = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, n: int) -> "_Pool":
        return cls._get_or_make(n, lambda: cls(n, n))


def _timeout():
    return CompileLimitError("compile_timeout_s", 1, 1, "test")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not reaped yet) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` has exited (or is a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def test_a_queued_job_past_its_deadline_stops_nothing_and_never_runs(tmp_path):
    pool = _Pool.get(1)
    pool.run(sleep_job, (0,), None, _timeout)  # started
    out: dict = {}

    def patient():
        out["patient"] = pool.run(sleep_job, (3,), time.monotonic() + 60, _timeout)[0]

    t = threading.Thread(target=patient)
    t.start()
    time.sleep(0.5)  # the patient job runs; the next waits behind it
    marker = tmp_path / "ran"
    t0 = time.monotonic()
    with pytest.raises(CompileLimitError) as e:
        pool.run(touch_job, (str(marker),), time.monotonic() + 0.5, _timeout)
    assert e.value.limit_name == "compile_timeout_s" and time.monotonic() - t0 < 2.5
    t.join(60)
    assert isinstance(out.get("patient"), int), out  # finished in its worker, not "died (memory?)"
    assert _Pool.get(1) is pool  # not dropped
    pool.run(sleep_job, (0,), None, _timeout)  # the abandoned job has had its turn by now
    assert not marker.exists()


def test_a_running_job_past_its_deadline_is_stopped_and_the_pool_replaced():
    pool = _Pool.get(1)
    pid = pool.run(sleep_job, (0,), None, _timeout)[0]
    with pytest.raises(CompileLimitError):
        pool.run(sleep_job, (60,), time.monotonic() + 0.5, _timeout)
    new = _Pool.get(1)
    assert new is not pool
    assert new.run(sleep_job, (0,), None, _timeout)[0] != pid
    assert _gone_within(pid, 10)


def _script(body: str) -> list[str]:
    code = textwrap.dedent(f"""
        import os, signal, sys, threading, time
        sys.path[:0] = [{str(TESTS)!r}, {str(ROOT)!r}]
        from structgate.errors import CompileLimitError
        from structgate.worker_pool import WorkerPool
        from _pool_checks import sleep_job

        class P(WorkerPool):
            _pools = {{}}
            _lock = threading.Lock()

        def to():
            return CompileLimitError("compile_timeout_s", 1, 1, "t")

        if __name__ == "__main__":
            pool = P._get_or_make(1, lambda: P(1, 1))
            pid = pool.run(sleep_job, (0,), None, to)[0]
            print("worker", pid, flush=True)
    """) + textwrap.indent(textwrap.dedent(body), "    ")
    return [sys.executable, "-c", code]


def _worker_pid(proc) -> int:
    line = proc.stdout.readline()
    assert line.startswith("worker "), line + proc.stderr.read()
    return int(line.split()[1])


def test_exit_does_not_wait_for_a_running_job():
    """A job without a deadline runs in a background thread when the main thread returns: the
    interpreter exits at once and the worker is gone (it waited for the job: forever here)."""
    p = subprocess.Popen(_script("""
        threading.Thread(target=pool.run, args=(sleep_job, (120,), None, to), daemon=True).start()
        time.sleep(1.0)
    """), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = _worker_pid(p)
    assert p.wait(timeout=30) == 0, p.stderr.read()
    assert _gone_within(pid, 10)


def test_ctrl_c_while_waiting_stops_the_worker():
    p = subprocess.Popen(_script("""
        print("waiting", flush=True)
        pool.run(sleep_job, (120,), None, to)
    """), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = _worker_pid(p)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=30)  # KeyboardInterrupt: a non-zero exit, promptly
    assert p.returncode != 0
    assert _gone_within(pid, 10)


def test_a_worker_exits_when_its_parent_is_killed():
    p = subprocess.Popen(_script("""
        os.kill(os.getpid(), signal.SIGKILL)
    """), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = _worker_pid(p)
    p.wait(timeout=30)
    assert _gone_within(pid, 20), "the orphaned worker is still running"


def test_a_forked_child_makes_its_own_pool_and_leaves_the_parents_alone():
    p = subprocess.Popen(_script("""
        child = os.fork()
        if child == 0:
            try:
                mine = P._get_or_make(1, lambda: P(1, 1))
                ok = mine is not pool and mine.run(sleep_job, (0,), time.monotonic() + 30, to)[0] != pid
            except BaseException as e:
                print("child failed", repr(e), flush=True)
                ok = False
            os._exit(0 if ok else 3)
        _, status = os.waitpid(child, 0)
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        print("parent", pool.run(sleep_job, (0,), time.monotonic() + 30, to)[0] == pid, flush=True)
    """), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _worker_pid(p)
    out, err = p.communicate(timeout=120)
    assert "child 0" in out and "parent True" in out, out + err


def test_unguarded_script_is_told_about_the_main_guard(tmp_path):
    """A script that compiles with worker processes at top level, without ``if __name__ ==
    "__main__":``, gets an error naming that guard (in each worker, which would otherwise try to
    start workers of its own while importing the script, and in the script), not only "could not be
    started"."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent("""
        from structgate.backends.interface import Constraint
        from structgate.backends.registry import get_backend
        from structgate.vocab import Vocabulary

        vocab = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])
        get_backend("native", vocab, compile_processes=1).compile(Constraint.regex("a+b"))
        print("compiled")
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp_path)
    assert r.returncode != 0 and "compiled" not in r.stdout
    last = r.stderr.strip().splitlines()[-1]
    assert "could not be started" in last and 'if __name__ == "__main__":' in last, r.stderr[-2000:]
    assert "started while a worker imports the main script" in r.stderr  # the workers' own error
    guarded = tmp_path / "guarded.py"
    body = script.read_text().split("vocab = ")[1]
    guarded.write_text(script.read_text().split("vocab = ")[0] + 'if __name__ == "__main__":\n    vocab = '
                       + body.replace("\n", "\n    "))
    r = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-2000:]


def test_script_read_from_stdin_is_told_to_run_from_a_file(tmp_path):
    """``python - < script.py`` (guarded or not): spawn cannot import ``<stdin>`` again, and the
    error says so rather than pointing at the main guard."""
    code = textwrap.dedent("""
        from structgate.backends.interface import Constraint
        from structgate.backends.registry import get_backend
        from structgate.vocab import Vocabulary

        if __name__ == "__main__":
            vocab = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])
            get_backend("native", vocab, compile_processes=1).compile(Constraint.regex("a+b"))
            print("compiled")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp_path)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "<stdin> cannot be; run it from a file" in last and "__main__" not in last, r.stderr[-2000:]
