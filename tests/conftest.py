"""Fixtures every test folder shares. Each test imports what it uses: nothing heavy is imported here
(the SDK warm-up that in-process pytester runs need is in tests/integration/conftest.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_aimeasure.store.runs import RunStore
    from pytest_aimeasure.testing import Outcome, ProviderServer, SeenRequest

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    """The suite starts a few hundred pytest processes (xdist workers, pytester subprocesses). Where the
    environment forbids bytecode caches (``PYTHONDONTWRITEBYTECODE``, common in containers), each would
    compile the plugin and rewrite its asserts anew, about 2 s of CPU a process. Set here, before xdist
    starts its workers, so they and every subprocess inherit it; caches are written atomically."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    # The suite calls litellm directly too (backend tests, no judging session, so the plugin installs
    # no filter): its pydantic warnings about its own types stay out of our warnings summary as they
    # do out of a user's.
    from pytest_aimeasure.judge.backends.sdk_warnings import quiet_sdk_schema_warnings

    quiet_sdk_schema_warnings()
    if getattr(config.option, "dist", "no") == "load" and not hasattr(config, "workerinput"):
        # Under -n, a module at a time to a worker, the costliest first (see pytest_collection_modifyitems).
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False


DURATIONS = Path(__file__).with_name("durations.txt")
"""The costliest tests as pytest's ``--durations`` lists them (``1.23s call tests/...::test_x``), from a
run of the README's command; other lines are ignored. Refresh it with
``.venv/bin/pytest -n 3 --durations=150 | grep -E '^[0-9.]+s ' > tests/durations.txt``."""


def module_costs(lines: list[str]) -> dict[str, float]:
    """Seconds per test module (its setups, calls and teardowns summed) in ``--durations`` lines."""
    costs: dict[str, float] = {}
    for line in lines:
        seconds, _, rest = line.partition("s ")
        when, _, nodeid = rest.strip().partition(" ")
        with contextlib.suppress(ValueError):
            if when in ("setup", "call", "teardown"):
                module = nodeid.strip().split("::", 1)[0]
                costs[module] = costs.get(module, 0.0) + float(seconds)
    return costs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the modules that cost the most run first (by :data:`DURATIONS`; the others after
    them, in their own order). Each worker is given a whole module at a time, the next in this order
    when it is nearly done (``--dist loadfile``, set at configure): a module's tests keep their order
    and their module fixtures are set up once, and the run ends on cheap modules, so no worker is
    left running a slow one while the others wait. Every worker sorts the same collection alike, as
    xdist requires. A serial run keeps pytest's order."""
    if not hasattr(config, "workerinput") or not DURATIONS.exists():
        return
    costs = module_costs(DURATIONS.read_text().splitlines())
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(item.nodeid.split("::", 1)[0], len(first_seen))

    def rank(item: pytest.Item) -> tuple[float, int]:
        module = item.nodeid.split("::", 1)[0]
        return -costs.get(module, 0.0), first_seen[module]

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real provider: drop keys and base URLs the machine might have."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def run_session(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """A pytest run of ``pytester``'s project in this process: no interpreter to start and no SDK or
    plugin module to import again. Under xdist (``-n``) only the workers get processes of their own;
    the controller, where the reports are merged and every file is written, runs here."""
    return pytester.runpytest(*args)


def run_pytest_here(cwd: Path, *args: str, env: Mapping[str, str | None] | None = None) -> tuple[int, str]:
    """``pytest *args`` started in ``cwd`` and run in this process, for fixtures wider than a test
    (pytester is a test's): its exit code and what it printed. As in pytester's in-process runs, the
    modules, import paths and finders the run adds are taken away after it (the project's conftest and
    test modules among them: a later run imports its own), and the environment (``env``; None removes
    a variable) and working folder are put back. A judged run needs ``_imported_outside_pytester``."""
    changes: dict[str, str | None] = {"PYTEST_ADDOPTS": None, "PYTEST_PLUGINS": None, **(env or {})}
    saved = {key: os.environ.get(key) for key in changes}
    modules, path, meta_path, before = set(sys.modules), list(sys.path), list(sys.meta_path), os.getcwd()
    out = io.StringIO()
    try:
        _set_env(changes)
        os.chdir(cwd)
        with contextlib.redirect_stdout(out):
            code = int(pytest.main(list(args), plugins=[NoCollectionAtTheEnd()]))
    finally:
        os.chdir(before)
        for name in set(sys.modules) - modules:
            del sys.modules[name]
        sys.path[:], sys.meta_path[:] = path, meta_path
        _set_env(saved)
    return code, out.getvalue()


class ForkedPytest:
    """``pytest *args`` run in ``cwd`` by a child forked from this process, for tests whose subject is
    what a session does when its process is killed or signalled: a process of its own, as a
    ``subprocess.Popen`` of pytest would be, without an interpreter to start and the SDKs and the
    plugin to import again (3-9 s of CPU a process; the child has this one's modules). It inherits the
    environment. What it prints goes to ``output`` (discarded when None). With ``new_session`` it leads
    a process group of its own (a signal sent to the group reaches its xdist workers too, as a
    terminal's Ctrl-C does) and takes SIGINT as a terminal leaves it to Python: raised as
    KeyboardInterrupt (the forking process may ignore or block it). Only the forking thread lives on in
    a child, so no other thread's work goes on there. The parts of ``Popen`` the tests use."""

    def __init__(self, cwd: Path, *args: str, output: Path | None = None, new_session: bool = False) -> None:
        self.returncode: int | None = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: a fork while threads run
            self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover (the child: it never returns into this session)
            code = 1
            try:
                if new_session:
                    os.setsid()
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
                devnull = os.open(os.devnull, os.O_RDWR)
                printed = devnull if output is None else os.open(output, os.O_WRONLY | os.O_CREAT)
                os.dup2(devnull, 0)
                os.dup2(printed, 1)
                os.dup2(printed, 2)
                sys.stdout = sys.stderr = open(1, "w", closefd=False)  # noqa: SIM115 (ends with the process)
                os.chdir(cwd)
                code = int(pytest.main(list(args), plugins=[NoCollectionAtTheEnd()]))
            except BaseException:
                # os._exit below prints nothing: what escaped pytest is shown with what it printed.
                with contextlib.suppress(BaseException):
                    import traceback

                    sys.stdout.write("pytest.main raised:\n" + traceback.format_exc())
                raise
            finally:
                with contextlib.suppress(BaseException):
                    sys.stdout.flush()
                os._exit(code)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the forked pytest (pid {self.pid}) still runs after {timeout} s")
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # No waitpid here: the local server's thread may send the signal while the test waits.
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


class NoCollectionAtTheEnd:
    """A plugin for a pytest run inside this process or a child forked from it: pytest runs no full
    garbage collection at its end to find unraisable exceptions (0.3-0.45 s of CPU over a worker's
    heap, twice a run), as pytester's in-process runs do not."""

    @staticmethod
    def pytest_configure(config: pytest.Config) -> None:
        with contextlib.suppress(ImportError):  # pytest before 8.4 has no such setting
            from _pytest.unraisableexception import gc_collect_iterations_key

            config.stash[gc_collect_iterations_key] = 0


def _set_env(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


ONE_WORKER = ("-n", "1")
"""The xdist arguments of a session whose project is one test module or suite file. In a measuring
session the plugin sets ``--dist loadfile``, which gives a file to one worker: with ``-n 2`` that
worker runs every test and the other only starts, collects and exits (about 1.5 s of CPU and, on a
loaded machine, seconds of wall time for nothing). The worker-to-controller path is the same.
Projects of two or more files keep ``-n 2``; what an idle worker does is checked with two workers by
``test_clear_items_stop_at_the_minimum_and_a_borderline_item_takes_more[xdist]`` (it imports no
transport), ``test_under_xdist_each_output_is_generated_once`` (it generates nothing of a suite
file it does not run) and test_interrupts' xdist variants (it gets the terminal's signal too)."""


def xdist_workers(project: Path) -> tuple[str, ...]:
    """The xdist arguments for a session of the project in ``project``: a worker for each test module
    or suite file (a loadfile scope), two at most; see :data:`ONE_WORKER`."""
    scopes = [*project.glob("test_*.py"), *project.glob("*.aimeasure.yaml")]
    return ("-n", str(min(2, max(1, len(scopes)))))


def read_results(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture
def as_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests that name the controller's store files: under xdist the default writer is gwN."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    """An empty, writable run store in a temporary folder."""
    from pytest_aimeasure.store.runs import RunStore

    s = RunStore(tmp_path / ".aimeasure")
    s.ensure_writable()
    return s


@pytest.fixture
def serve(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[Callable[[SeenRequest], Outcome]], ProviderServer]]:
    """Start local provider servers with a scorer; the anthropic SDK is pointed at the last one::

    def test_it(serve, pytester):
        server = serve(lambda seen: 4)
        pytester.runpytest("--ai-judge", "--judge-model", "anthropic/claude-test")
        assert server.calls == 3
    """
    from pytest_aimeasure.testing import ProviderServer

    servers: list[ProviderServer] = []

    def start(scorer: Callable[[SeenRequest], Outcome]) -> ProviderServer:
        server = ProviderServer(scorer=scorer).start()
        servers.append(server)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        return server

    yield start
    for server in servers:
        server.stop()
