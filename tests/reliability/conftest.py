"""Fixtures and hooks of the reliability suite.

* `planted_key` (package-wide, automatic): puts `PLANTED_KEY` in the providers' environment variables and
  captures every log record while the suite runs; at the end it checks that the key appears in no log record,
  no error, repr or request body the tests handed to the ledger, and no test report.
* `servers`: one fake server per provider, shared by the whole suite.
* `fault`: what a test declares it injects, and the leak / memory checks it runs (see `_support.Fault`).
* With `AGENTLOOP_RELIABILITY_REPORT=path`, the session writes the ledger as JSON to `path`;
  `python -m tests.reliability.report path` renders it as the tables of `docs/reliability.md`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.testing._fake_server import FakeServer

from ._support import LEDGER, PLANTED_KEY, Fault
from ._wire import PROVIDERS, fake_server

_LOGGERS = ("agentloop", "httpx2", "httpcore2", "httpx", "httpcore")


class _Capture(logging.Handler):
    """Keeps every record's full text (message, arguments, exception) for the final scan."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record))


SECRETS: dict[str, int] = {}


@pytest.fixture(scope="package", autouse=True)
def planted_key() -> Iterator[str]:
    patch = pytest.MonkeyPatch()
    patch.setenv("OPENAI_API_KEY", PLANTED_KEY)
    patch.setenv("ANTHROPIC_API_KEY", PLANTED_KEY)
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OLLAMA_BASE_URL"):
        patch.delenv(name, raising=False)
    capture = _Capture()
    root = logging.getLogger()
    root.addHandler(capture)
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield PLANTED_KEY
    finally:
        root.removeHandler(capture)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        patch.undo()
    LEDGER.scan("log records", *capture.texts)
    leaks = LEDGER.leaks()
    SECRETS.update(
        texts_scanned=len(LEDGER.texts),
        log_records=len(capture.texts),
        leaks=len(leaks),
    )
    assert not leaks, f"the planted API key leaked into: {sorted(set(leaks))}"
    if any(record.category == "wire" for record in LEDGER.records.values()):
        # The scan must have had something to look at: retries log, and the wire faults raise errors.
        assert len(capture.texts) > 0 and len(LEDGER.texts) > len(capture.texts)


@pytest.fixture(scope="package", autouse=True)
def one_ssl_context() -> Iterator[None]:
    """Every provider model builds its own httpx2 client, and each client an SSL context (~25 ms of loading
    certificates). Nothing here speaks TLS: the suite shares one context to stay fast."""
    import httpx2._transports.default as transports

    original = transports.create_ssl_context  # type: ignore[attr-defined]
    made: dict[bool, Any] = {}

    def shared_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return original(verify=verify, cert=cert, trust_env=trust_env)
        if trust_env not in made:
            made[trust_env] = original(verify=verify, cert=cert, trust_env=trust_env)
        return made[trust_env]

    patch = pytest.MonkeyPatch()
    patch.setattr(transports, "create_ssl_context", shared_context)
    yield
    patch.undo()


@pytest.fixture(scope="package")
def servers() -> Iterator[dict[str, FakeServer]]:
    """One fake server per provider for the whole suite; each test counts its own requests (`Requests`)."""
    started = {provider: fake_server(provider).start() for provider in PROVIDERS}
    yield started
    for server in started.values():
        server.stop()


@pytest.fixture
def fault(request: pytest.FixtureRequest) -> Fault:
    backend = "-"
    if "anyio_backend" in request.fixturenames:
        backend = str(request.getfixturevalue("anyio_backend"))
    return Fault(request.node.nodeid, backend)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    LEDGER.scan(f"report of {item.nodeid} ({report.when})", report.longreprtext)
    LEDGER.scan(f"output of {item.nodeid} ({report.when})", *(text for _, text in report.sections))
    record = LEDGER.records.get(item.nodeid)
    if record is None:
        return
    if report.skipped and not hasattr(report, "wasxfail"):
        del LEDGER.records[item.nodeid]  # not tried
    elif report.when == "call":
        record.passed = report.passed
    elif report.failed:
        record.passed = False


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("AGENTLOOP_RELIABILITY_REPORT")
    if not target or not LEDGER.records:
        return
    records = [record.as_json() for record in LEDGER.records.values()]
    summary: dict[str, Any] = {
        "faults_tried": len(records),
        "faults_passed": sum(1 for r in records if r["passed"]),
        **LEDGER.totals(),
        "secrets": dict(SECRETS),
    }
    Path(target).write_text(json.dumps({"summary": summary, "faults": records}, indent=1) + "\n")
