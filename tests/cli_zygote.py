"""A fork server for the suite's command-line runs: the libraries imported once, each run a fork of it.

Every ``python -m rlplug`` spends seconds importing torch, tensordict and TorchRL before it reads its
arguments, and the suite starts a few hundred of them. This server (one per pytest process, started by
``conftest.run_cli``) imports those libraries once, as ``rlplug.cli.main`` would (``RL_LOGGING_LEVEL``
defaulted first), and answers each request with a fork that becomes ``python -m rlplug ARGS``: its own
process, working directory, environment, ``sys.path``, stdout and stderr files, and exit status (a signal's
as ``-N``, as ``subprocess`` reports it). rlplug itself and its plugins are imported fresh in each fork
(Ray in part: TorchRL's collectors import some of it, so Ray's settings are part of the server's).

Protocol, one connection per run: the client sends one JSON line ``{"args", "cwd", "env", "stdout",
"stderr"}``; the server answers the fork's pid, then its exit status, one line each.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import io
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

#: What the server imports before forking: the libraries every training run imports.
PRELOADED = ("torch", "tensordict", "torchrl.envs", "torchrl.objectives", "torchrl.collectors", "torchrl.data",
             "torchrl.modules", "gymnasium", "numpy")

#: Environment variables read when those libraries are imported: a run asking for other values than the
#: server's own gets a new server started under them (:meth:`Server.address`).
IMPORT_TIME_PREFIXES = ("TORCH", "OMP_", "MKL_", "CUDA", "PYTORCH", "RL_LOGGING", "TENSORDICT", "PYTHON",
                        "RAY_")  # TorchRL's collectors import Ray, whose settings (RAY_AUTH_MODE) are then fixed
NOT_IMPORT_TIME = ("PYTHONPATH", "PYTHONUNBUFFERED")


def import_time_environment(env: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items()
            if key.startswith(IMPORT_TIME_PREFIXES) and key not in NOT_IMPORT_TIME}


def serve(address: str) -> None:
    os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")
    for name in PRELOADED:
        importlib.import_module(name)
    base_path = [entry for entry in sys.path[1:] if entry not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    gc.freeze()  # the forks' collections leave the libraries' objects (and their pages) alone
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".tmp")
    listener.listen(16)
    os.rename(address + ".tmp", address)  # the client waits for this name: it appears only when ready
    owner = os.getppid()
    waiting: dict[int, socket.socket] = {}
    while os.getppid() == owner:
        ready, _, _ = select.select([listener], [], [], 0.02)
        if ready:
            connection, _ = listener.accept()
            request = json.loads(connection.makefile("r").readline())
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                become_the_command(request, base_path)  # never returns
            connection.sendall(f"{pid}\n".encode())
            waiting[pid] = connection
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = waiting.pop(pid)
            connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            connection.close()


def become_the_command(request: dict, base_path: list[str]) -> None:
    """This fork turns into ``python -m rlplug ARGS`` run in ``cwd`` with ``env``: ``-m`` puts the working
    directory first on ``sys.path``, then ``PYTHONPATH``; stdio are unbuffered files, as ``PYTHONUNBUFFERED``
    makes them."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [entry for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:] = [os.getcwd(), *extra, *base_path]
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                                   write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                                   errors="backslashreplace", write_through=True)
    sys.argv = ["-m", *request["args"]]
    try:
        runpy.run_module("rlplug", run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as stop:
        status = exit_status(stop.code)
    except KeyboardInterrupt:
        raise  # Python's own ending: the process dies of SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    end_as_python_does(status)


def exit_status(code: object) -> int:
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def end_as_python_does(status: int) -> None:
    """Python's ending as a process sees it (other threads joined, ``atexit`` run, streams flushed), without
    its teardown of every module: with torch loaded that costs the fork whole seconds of copied pages."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


class Server:
    """This pytest process's server, started at the first run and stopped when the process ends."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.process: subprocess.Popen | None = None
        self.imported_with: dict[str, str] = {}

    def address(self, env: dict[str, str]) -> str | None:
        """The server's socket for a run in ``env`` (a new server where ``env`` changes what the libraries read
        when imported), or None where the server is off or would not start (the run is a plain subprocess)."""
        if os.environ.get("RLPLUG_TEST_PLAIN_SUBPROCESS"):
            return None
        if self.process is not None and import_time_environment(env) != self.imported_with:
            self.process.kill()  # a new one under the new settings (a Ray test's ray.init sets RAY_AUTH_MODE)
            self.process.wait()
            self.process = None
        if self.process is None:
            self.imported_with = import_time_environment(env)
            self.folder = Path(tempfile.mkdtemp(prefix="rlplug-zygote-"))
            log = open(self.folder / "socket.log", "w")
            self.process = subprocess.Popen([sys.executable, __file__, str(self.folder / "socket")],
                                            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            atexit.register(self.process.kill)
        assert self.folder is not None
        address = self.folder / "socket"
        deadline = time.monotonic() + 120
        while not address.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        return str(address)


ZYGOTE = Server()


def run(address: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float
        ) -> subprocess.CompletedProcess:
    """What ``subprocess.run([python, "-m", "rlplug", *args], capture_output=True, text=True)`` returns,
    the process forked by the server at ``address``; past ``timeout`` it is killed and ``TimeoutExpired``
    raised, as ``subprocess.run`` does."""
    started = Started(address, args, cwd, env)
    try:
        started.wait(timeout)
    except subprocess.TimeoutExpired:
        started.kill()
        stdout, stderr = started.communicate()
        raise subprocess.TimeoutExpired(started.args, timeout, stdout, stderr) from None
    stdout, stderr = started.communicate()
    return subprocess.CompletedProcess(started.args, started.wait(), stdout, stderr)


class Started:
    """What ``subprocess.Popen([python, "-m", "rlplug", *args], stdout=PIPE, stderr=PIPE, text=True)`` gives a
    test that starts a run in the background (``pid``, ``poll``, ``wait``, ``communicate``, ``send_signal``,
    ``terminate``, ``kill``, ``returncode``), for a fork of the server at ``address``: its exit status comes
    from the server, its output from files (which, unlike pipes, never fill up and stop the run)."""

    def __init__(self, address: str, args: list[str], cwd: Path, env: dict[str, str]):
        self.args, self.address = [sys.executable, "-m", "rlplug", *args], address
        folder = Path(tempfile.mkdtemp(prefix="rlplug-started-"))
        weakref.finalize(self, shutil.rmtree, folder, True)
        self.stdout_path, self.stderr_path = folder / "stdout", folder / "stderr"
        request = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(self.stdout_path),
                   "stderr": str(self.stderr_path)}
        self.connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.connection.connect(address)
        self.connection.sendall((json.dumps(request) + "\n").encode())
        self.pid = int(answer(self.connection, None))
        self.returncode: int | None = None

    def ended(self, line: str) -> int:
        if not line:
            raise RuntimeError(f"the command-line server ended before its run did (its log: {self.address}.log)")
        self.returncode = int(line)
        self.connection.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.connection], [], [], 0)[0]:
            self.ended(answer(self.connection, None))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.ended(answer(self.connection, timeout))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return read(self.stdout_path), read(self.stderr_path)

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def answer(connection: socket.socket, timeout: float | None) -> str:
    """The server's next line ("" where it closed the connection); ``TimeoutError`` past ``timeout`` seconds."""
    connection.settimeout(timeout)
    line = b""
    while not line.endswith(b"\n"):
        chunk = connection.recv(1)
        if not chunk:
            break
        line += chunk
    return line.decode().strip()


def read(path: Path) -> str:
    """A captured stream as ``text=True`` gives it: the locale's encoding, universal newlines."""
    return path.read_text() if path.exists() else ""


if __name__ == "__main__":
    serve(sys.argv[1])
