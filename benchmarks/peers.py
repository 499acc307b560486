"""The peers' virtualenvs: one per peer in benchmarks/.venvs/, pinned by requirements/<peer>.txt.

    python benchmarks/peers.py install      # create or update every venv (what `nox -s bench` runs)
    python benchmarks/peers.py status

Each peer gets its own venv (their pins conflict: langchain-openai and pydantic-ai want different openai
releases at times) made from the interpreter running this script, so every contender runs on the same
Python. A venv is rebuilt only when its requirements file changed. A failed install is reported and the
peer is then skipped by run.py, never a crash.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"
REQUIREMENTS = HERE / "requirements"

# peer name (venv and requirements file) -> contender module in benchmarks/contenders/
PEERS = {"pydantic-ai": "pydantic_ai", "openai-agents": "openai_agents", "langchain": "langchain"}


def interpreter(peer: str) -> Path:
    """The peer venv's python (it may not exist)."""
    return VENVS / peer / "bin" / "python"


def _digest(peer: str) -> str:
    text = (REQUIREMENTS / f"{peer}.txt").read_bytes() + sys.version.encode()
    return hashlib.sha256(text).hexdigest()


def _stamp(peer: str) -> Path:
    return VENVS / peer / ".requirements-sha256"


def is_current(peer: str) -> bool:
    stamp = _stamp(peer)
    return interpreter(peer).exists() and stamp.exists() and stamp.read_text() == _digest(peer)


def install(peer: str) -> bool:
    """Creates (or recreates) the peer's venv and installs its pinned requirements; False on failure."""
    if is_current(peer):
        print(f"peers: {peer}: up to date ({VENVS / peer})", flush=True)
        return True
    target = VENVS / peer
    if target.exists():
        shutil.rmtree(target)
    print(f"peers: {peer}: creating {target}", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=300)
        subprocess.run(
            [
                str(interpreter(peer)),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
                str(REQUIREMENTS / f"{peer}.txt"),
            ],
            check=True,
            timeout=1200,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        print(f"peers: {peer}: install FAILED ({exc}); it will be reported as skipped", file=sys.stderr)
        return False
    _stamp(peer).write_text(_digest(peer))
    print(f"peers: {peer}: installed", flush=True)
    return True


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else "status"
    if command == "install":
        for peer in PEERS:
            install(peer)
        return 0  # a peer that failed to install is skipped by the benchmark, not fatal
    if command == "status":
        for peer in PEERS:
            state = "current" if is_current(peer) else ("stale" if interpreter(peer).exists() else "missing")
            print(f"{peer}: {state} ({VENVS / peer})")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
