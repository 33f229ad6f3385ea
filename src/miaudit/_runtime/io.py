"""The one I/O module: atomic writes, verified reads, digests, figures.

Every file is written to a temporary name in the same folder, flushed to disk, then renamed
(``os.replace`` is atomic on POSIX), so a kill at any moment leaves either the old complete file
or no file, never half of one. Temporary names start with ``.`` and end with ``.tmp``;
:func:`sweep_temporaries` removes those a kill left behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.errors import RunDirError

TMP_SUFFIX = ".tmp"


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` and move the result to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                        suffix=TMP_SUFFIX)
    os.close(handle)
    tmp_path = Path(tmp_name)
    try:
        write(tmp_path)
        # mkstemp makes 0600, and some writers (safetensors) recreate the file 0600: after
        # writing, give it the mode any other file gets
        os.chmod(tmp_path, 0o666 & ~_umask())
        with open(tmp_path, "rb+") as stream:
            os.fsync(stream.fileno())
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


def path_problem(path: Path, want: str = "file") -> str:
    """Why ``path`` is not the ``want`` ("file" or "folder") asked for: it does not exist, or
    it is of the other kind (never "does not exist" of a path that exists)."""
    path = Path(path)
    if not path.exists():
        return f"{path} does not exist"
    other = "folder" if path.is_dir() else "file" if path.is_file() else "special file"
    return f"{path} is a {other}, not a {want}"


def printable(name: str) -> str:
    """A file or folder name as every output can hold it: bytes that are not UTF-8 (Python
    keeps them as surrogate escapes) written as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def write_json(path: Path, value: Any) -> None:
    write_bytes(path, (json.dumps(value, indent=2, sort_keys=False) + "\n").encode())


def read_json(path: Path, expect: type | None = dict) -> Any:
    """Parse a JSON file; a missing, truncated or wrongly shaped file raises RunDirError
    naming it and how to recover."""
    path = Path(path)
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunDirError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunDirError(f"{path} is unreadable or truncated ({error}); delete it and rerun "
                          "the audit to rebuild it") from None
    if expect is not None and not isinstance(value, expect):
        raise RunDirError(f"{path} holds a {type(value).__name__}, expected a "
                          f"{expect.__name__}; delete it and rerun the audit to rebuild it")
    return value


def write_array(path: Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    write_bytes(path, buffer.getvalue())


def read_array(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise RunDirError(f"cannot read array {path}: {error}") from None


def write_tensors(path: Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
                  ) -> None:
    from safetensors.torch import save_file

    contiguous = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    atomic_write(path, lambda tmp: save_file(contiguous, str(tmp), metadata=metadata))


def read_tensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own error types
        raise RunDirError(f"cannot read tensors {path}: {error}") from None


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (artefact integrity)."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def text_digest(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    """sha256 of a JSON-able value in canonical form (identities); ``default`` turns values
    JSON cannot hold into ones it can (as in :func:`json.dumps`)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=default).encode()
                          ).hexdigest()


DIGEST_KEY = "sha256"  # the key of a self-digesting record's digest of its own content


def write_digested_json(path: Path, record: dict[str, Any]) -> None:
    """Write a record that has no data file with the digest of its own JSON content, so
    damage or a hand edit is found on reading (:func:`read_digested_json`)."""
    content = json.loads(json.dumps(record))  # the digest covers what a reader parses back
    write_json(path, {**content, DIGEST_KEY: text_digest(content)})


def read_digested_json(path: Path) -> tuple[dict[str, Any], str | None]:
    """(content, problem) of a record written by :func:`write_digested_json`; ``problem`` is
    None when the digest matches, else what is wrong. Unreadable files raise RunDirError."""
    record = read_json(path)
    stored = record.pop(DIGEST_KEY, None)
    if stored is None:
        return record, "no digest"
    if stored != text_digest(record):
        return record, "its content does not match its digest"
    return record, None


DIGESTS = "digests.json"  # a folder's record of its data files' digests {name: sha256}


def record_digests(folder: Path, names: list[str]) -> None:
    """Add the digests of files ``names`` of ``folder`` to the folder's digest record
    (:data:`DIGESTS`, itself self-digesting), so that :func:`verify_file` finds a damaged
    file when it is read. Call it after the files are written; a kill in between leaves a
    record that names them as damaged, and the writer rebuilds them."""
    folder = Path(folder)
    digests = dict(_folder_digests(folder) or {})
    digests.update({name: file_digest(folder / name) for name in names})
    write_digested_json(folder / DIGESTS, digests)


def verify_file(path: Path, recovery: str) -> Path:
    """``path`` when it matches the digest its folder's record (:data:`DIGESTS`) holds;
    RunDirError naming it and ``recovery`` when it is damaged or the record is. A folder
    without a record (written before miaudit recorded digests) is read unverified; a file
    the record does not list too (added by hand, or a kind recorded elsewhere)."""
    path = Path(path)
    digests = _folder_digests(path.parent, recovery)
    if digests is None or path.name not in digests:
        return path
    if not path.is_file():
        raise RunDirError(f"{path_problem(path)}; {recovery}")
    if file_digest(path) != digests[path.name]:
        raise RunDirError(f"{path} is damaged (its digest differs from "
                          f"{path.parent / DIGESTS}); {recovery}")
    return path


def _folder_digests(folder: Path, recovery: str = "") -> dict[str, str] | None:
    path = Path(folder) / DIGESTS
    if not path.exists():
        return None
    try:
        digests, problem = read_digested_json(path)
    except RunDirError as error:
        problem = str(error)
    if problem is not None:
        if not recovery:  # rewriting the record: the files it lists are checked again
            return {}
        raise RunDirError(f"{path} is damaged ({problem}); {recovery}")
    return digests


def write_digested_bytes(path: Path, payload: bytes) -> None:
    """``payload`` preceded by a header line with its sha256: a file that carries its own
    digest (e.g. a torch checkpoint, whose format has none), checked by
    :func:`read_digested_bytes`."""
    header = f"miaudit-sha256 {hashlib.sha256(payload).hexdigest()}\n".encode()
    write_bytes(path, header + payload)


def read_digested_bytes(path: Path) -> tuple[bytes, str | None]:
    """(payload, problem) of a file written by :func:`write_digested_bytes`; ``problem`` is
    None when the payload matches its digest."""
    raw = Path(path).read_bytes()
    header, _, payload = raw.partition(b"\n")
    if not header.startswith(b"miaudit-sha256 "):
        return raw, "no digest"
    if header.removeprefix(b"miaudit-sha256 ").decode("ascii", "replace") != \
            hashlib.sha256(payload).hexdigest():
        return payload, "its content does not match its digest"
    return payload, None


#: the most bytes a compressed input (gzip, tar or zip/npz member) may expand to, and the
#: most an .npy array may declare: a decompression bomb of a few MB would otherwise take all
#: memory before anything could say so
MAX_DECOMPRESSED_BYTES = 512 * 2**20


def array_file_problem(source: Path | bytes, where: str) -> str | None:
    """Why an .npy / .npz file (a path or its bytes) must not be loaded, read from its zip
    directory and array headers only: its members expand to more than
    :data:`MAX_DECOMPRESSED_BYTES`, or an array declares more data than it holds (np.load
    would allocate the declared size first). None when loading is bounded."""
    import zipfile

    stream = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")  # noqa: SIM115
    with stream:
        if not zipfile.is_zipfile(stream):
            stream.seek(0)
            size = stream.seek(0, os.SEEK_END)
            stream.seek(0)
            return _npy_problem(stream, size, where)
        try:
            with zipfile.ZipFile(stream) as archive:
                members = archive.infolist()
                total = sum(member.file_size for member in members)
                if total > MAX_DECOMPRESSED_BYTES:
                    return (f"{where} expands to {total / 2**20:,.0f} MiB when decompressed, more "
                            f"than the {MAX_DECOMPRESSED_BYTES // 2**20} MiB allowed (a "
                            "decompression bomb, or very large arrays); save it uncompressed "
                            "(np.save per array) or in smaller files")
                for member in members:
                    if member.filename.endswith(".npy"):
                        with archive.open(member) as inner:
                            problem = _npy_problem(inner, member.file_size,
                                                   f"{where} (array {member.filename[:-4]!r})")
                        if problem:
                            return problem
        except (zipfile.BadZipFile, OSError, EOFError) as error:
            return f"{where} is not a readable .npz file: {error}"
    return None


def _npy_problem(stream: Any, size: int, where: str) -> str | None:
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(stream)
        reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _, dtype = reader(stream)
    except Exception:  # noqa: BLE001 - not an .npy header: np.load says what it is
        return None
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if declared > MAX_DECOMPRESSED_BYTES and declared > size:
        return (f"{where} declares an array of shape {tuple(shape)} ({declared / 2**20:,.0f} MiB) "
                f"but holds {size:,} bytes: damaged or hostile; save it again with np.save")
    return None


def copy_file(source: Path, destination: Path) -> None:
    """Copy atomically. Never a hard link: damage in one copy must not reach another."""
    atomic_write(destination, lambda tmp: shutil.copyfile(source, tmp))


def sweep_temporaries(root: Path) -> int:
    """Delete temporary files and staging folders that a killed process left under ``root``
    (names ``.*.tmp``); returns how many were removed. Call it only while holding the lock."""
    removed = 0
    if not Path(root).is_dir():
        return 0
    for path in Path(root).rglob(f".*{TMP_SUFFIX}"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed += 1
    return removed


def plain_text(figure: Any) -> None:
    """Draw every text of ``figure`` as written: user text (attack labels, run names) is
    never matplotlib math, so a label such as "$\\foo$" cannot fail the rendering. Tick labels
    are left alone (see :func:`axis_generated_texts`)."""
    from matplotlib.text import Text

    generated = {id(text) for text in axis_generated_texts(figure)}
    for text in figure.findobj(Text):
        if id(text) not in generated:
            text.set_parse_math(False)


def axis_generated_texts(figure: Any) -> list[Any]:
    """Texts that matplotlib's tick formatters write (tick labels such as
    ``$\\mathdefault{10^{-3}}$`` on a log axis, the offset text): they are math by design, and
    drawn as written they would read as that raw string."""
    texts = []
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            texts.append(axis.get_offset_text())
            for tick in (*axis.get_major_ticks(), *axis.get_minor_ticks()):
                texts.extend((tick.label1, tick.label2))
    return texts


def save_figure(figure: Any, path: str | Path, dpi: int = 120) -> Path:
    """Save a matplotlib figure atomically (format from the suffix) and close it. A PNG gets
    vector copies beside it (same stem, ``.svg`` with text as text, and ``.pdf``) for papers."""
    import matplotlib
    import matplotlib.pyplot as plt

    path = Path(path)
    plain_text(figure)
    formats = [path.suffix.lstrip(".") or "png"]
    if formats == ["png"]:
        formats += ["svg", "pdf"]
    try:
        for form in formats:
            target = path.with_suffix(f".{form}") if form != formats[0] else path
            with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": target.stem}):
                atomic_write(target, lambda tmp, form=form: _save_as(figure, tmp, dpi, form))
    finally:
        plt.close(figure)
    return path


def _save_as(figure: Any, path: Path, dpi: int, form: str) -> None:
    """One format of a figure; an SVG without the comments in which matplotlib repeats each
    text's source (a tick label's ``$\\mathdefault{...}$``), and without a creation date."""
    if form != "svg":
        metadata = {"CreationDate": None} if form == "pdf" else None
        figure.savefig(path, dpi=dpi, format=form, metadata=metadata)
        return
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    Path(path).write_text(strip_svg_comments(buffer.getvalue()), encoding="utf-8")


def strip_svg_comments(svg: str) -> str:
    return re.sub(r"[ \t]*<!--.*?-->\n?", "", svg, flags=re.S)
