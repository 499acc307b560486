"""agentloop's reliability and security suite: injected faults, hostile model output, cancellation at every
await point, fuzzing, and a planted API key that must appear nowhere. `report.py` renders the counts."""
