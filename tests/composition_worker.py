"""The composition suite's other process: resumes paused rounds sent as JSON lines (tests/composition.py).

Its own module, so that the scenario's types keep their module name (`tests.composition.Sum`), as in the
process that paused.
"""

from __future__ import annotations

import json
import sys

import anyio

from tests.composition import resume_here


def main() -> None:
    """One JSON request a line on stdin, one JSON answer a line on stdout."""
    for line in sys.stdin:
        spec = json.loads(line)
        try:
            answer = anyio.run(resume_here, spec, backend=spec.get("backend", "asyncio"))
        except Exception as error:  # the test shows what went wrong
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
