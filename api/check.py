"""The public API, recorded and checked.

`python api/check.py record` writes api/public-api.json: every name in `__all__` of `agentloop` and of its
public subpackages, with signatures, as griffe reads them. `python api/check.py` (`nox -s api`, CI) compares
the code with that record and fails on a breaking change that CHANGELOG.md's [Unreleased] does not announce.

Announced means: the changed object's public path (e.g. `agentloop.Agent.chat`, `agentloop.models.ChatModel`)
appears in backticks under the "### Removed" or "### Changed" heading of [Unreleased], or a parent's path
does (announcing `agentloop.Agent` covers its methods). After a release, record again.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's agentloop, whatever else is installed
from agentloop._hints import PUBLIC_MODULES  # noqa: E402  (the public modules, as the import hints know them)

RECORD = ROOT / "api" / "public-api.json"
CHANGELOG = ROOT / "CHANGELOG.md"


def public_api(search_path: Path = ROOT) -> griffe.Module:
    """A module tree holding exactly the public names, each under its public path (`agentloop.Agent`, not
    where it is defined), so that moving a private module is not a change and renaming a public name is."""
    package = griffe.load(
        "agentloop", search_paths=[str(search_path)], try_relative_path=False, resolve_aliases=True
    )
    root = griffe.Module("agentloop")
    for dotted in PUBLIC_MODULES:
        source = package if dotted == "agentloop" else package[dotted.removeprefix("agentloop.")]
        if dotted == "agentloop":
            target = root
        else:
            target = griffe.Module(dotted.rpartition(".")[2], parent=root)
            root.set_member(target.name, target)
        names = source.exports if source.exports is not None else []
        for name in sorted(str(name) for name in names):
            member = source[name]
            obj = member.final_target if isinstance(member, griffe.Alias) else member
            shape = _shape(json.loads(obj.as_json()))
            target.set_member(name, json.loads(json.dumps(shape), object_hook=griffe.json_decoder))
    return root


# What an API record leaves out: where things are defined and what they say, which are not the API.
# Line numbers stay as 0 (griffe's decoder needs them).
_NOT_API = {"docstring", "filepath", "relative_filepath", "path", "git_info", "source"}
_LINES = {"lineno", "endlineno"}


def _shape(data: object) -> object:
    """`data` (griffe's JSON of an object) without the keys in `_NOT_API`, at every depth."""
    if isinstance(data, dict):
        kept = {key: value for key, value in data.items() if key not in _NOT_API}
        shaped = {key: 0 if key in _LINES else _shape(value) for key, value in kept.items()}
        members = shaped.get("members")
        if isinstance(members, dict):  # private members (`_run`) are not the API; dunders (`__init__`) are
            shaped["members"] = {
                name: member
                for name, member in members.items()
                if not name.startswith("_") or (name.startswith("__") and name.endswith("__"))
            }
        return shaped
    if isinstance(data, list):
        return [_shape(value) for value in data]
    return data


def announced(changelog: Path = CHANGELOG) -> set[str]:
    """The object paths named in backticks under [Unreleased]'s Removed and Changed headings."""
    text = changelog.read_text() if changelog.exists() else ""
    unreleased = re.search(r"^## \[Unreleased\]\n(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    if unreleased is None:
        return set()
    paths: set[str] = set()
    for section in re.finditer(
        r"^### (Removed|Changed)\n(.*?)(?=^### |\Z)", unreleased.group(1), flags=re.MULTILINE | re.DOTALL
    ):
        paths.update(re.findall(r"`(agentloop[\w.]*)`", section.group(2)))
    return paths


def is_announced(path: str, paths: set[str]) -> bool:
    return any(path == known or path.startswith(known + ".") for known in paths)


def describe(change: griffe.Breakage) -> str:
    """One line: the object's public path, what changed, and from what to what."""
    old, new = change.old_value, change.new_value
    values = f": {_text(old)} -> {_text(new)}" if old is not None or new is not None else ""
    return f"{change.obj.path}: {change.kind.value}{values}"


def _text(value: object) -> str:
    return getattr(value, "name", None) or str(value) if not isinstance(value, str) else value


def recorded() -> griffe.Module:
    """The public API as api/public-api.json recorded it."""
    module: griffe.Module = json.loads(RECORD.read_text(), object_hook=griffe.json_decoder)
    return module


def compare(
    current: griffe.Module, baseline: griffe.Module, changelog: Path = CHANGELOG
) -> tuple[list[griffe.Breakage], list[griffe.Breakage]]:
    """Every breaking change from `baseline` to `current`, and those of them `changelog` does not announce."""
    paths = announced(changelog)
    breaks = list(griffe.find_breaking_changes(baseline, current))
    return breaks, [change for change in breaks if not is_announced(change.obj.path, paths)]


def main(argv: list[str]) -> int:
    current = public_api()
    if argv[:1] == ["record"]:
        RECORD.write_text(json.dumps(_shape(json.loads(current.as_json())), indent=0, sort_keys=True) + "\n")
        print(f"recorded the public API in {RECORD.relative_to(ROOT)}")
        return 0
    breaks, unannounced = compare(current, recorded())
    for change in breaks:
        mark = "announced" if change not in unannounced else "NOT ANNOUNCED"
        print(f"{mark}: {describe(change)}")
    if unannounced:
        print(
            f"\n{len(unannounced)} breaking change(s) of the public API not announced: name each object "
            "(e.g. `agentloop.Agent.chat`) under ### Removed or ### Changed in CHANGELOG.md's [Unreleased] "
            "section, or undo the change. After a release: python api/check.py record"
        )
        return 1
    print(
        f"public API: {len(breaks)} breaking change(s), all announced in CHANGELOG.md"
        if breaks
        else "public API: no breaking change against api/public-api.json"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
