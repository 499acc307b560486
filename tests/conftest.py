"""Every async test runs on both anyio backends: asyncio and trio."""

from __future__ import annotations

import inspect
from typing import Any

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> None:
    # Mark coroutine tests before anyio's plugin looks at them, so it parametrizes them over anyio_backend.
    if isinstance(collector, (pytest.Module, pytest.Class)) and collector.istestfunction(obj, name):
        inner = getattr(getattr(obj, "hypothesis", None), "inner_test", obj)
        if inspect.iscoroutinefunction(inner):
            pytest.mark.anyio(obj)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Under pytest-xdist (`--dist loadgroup`, as `nox -s tests` runs), every local-model test goes to one
    # worker: two llama.cpp instances on a 2-core machine each slow the other down about tenfold. `tryfirst`:
    # xdist reads the groups in its own hook of this name, which would otherwise run first and see none.
    for item in items:
        if item.get_closest_marker("local_model") is not None:
            item.add_marker(pytest.mark.xdist_group("local_model"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    # xdist groups a test by appending "@<group>" to its node id, which pytest 9.2 no longer lets it do
    # (pytest-dev/pytest-xdist#1386): the local-model tests would silently spread over both workers again.
    grouped = item.get_closest_marker("xdist_group") is not None
    if grouped and getattr(item.config.option, "loadgroup", False) and "@" not in item.nodeid:
        pytest.fail(
            "pytest-xdist did not put this test in its xdist_group: this pytest and pytest-xdist pair "
            "cannot (pytest-dev/pytest-xdist#1386); install the test extra's pins (pytest<9.2)",
            pytrace=False,
        )
