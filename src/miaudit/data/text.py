"""Text data for language-model audits: documents or fixed-length token chunks as the unit of
membership, tokenized with the model's tokenizer.

Data set ``text`` reads ``data_dir``: one file, or every file matching ``pattern`` in a folder
(sorted), in one of the formats

- ``lines``: one document per non-empty line;
- ``jsonl``: one JSON object per line, the document in field ``field`` (default ``text``);
- ``csv``: the document in column ``field`` (a header name; default ``text``);
- ``fortune``: documents separated by lines holding only ``%`` (Debian's ``fortunes``);

(``format: auto`` picks by suffix: .jsonl, .csv, else lines). Options ``unit``: ``document``
(each document one sample, cut to ``max_tokens``) or ``chunk`` (all documents' tokens joined,
separated by the end-of-text token, cut into samples of exactly ``max_tokens``);
``tokenizer``: ``bytes`` (UTF-8 bytes, ids 0..255, 256 = begin/end of text; needs no training,
for models built from a config), ``bpe:<vocab size>`` (a byte-level BPE trained with HF
``tokenizers`` on the pool's own texts: identical for every model, so it cannot tell members
apart), or the path of a local HF tokenizer (a checkpoint folder, or a ``tokenizer.json``),
which must be the audited model's own. ``max_samples`` keeps the first samples only (file
order; ``data.pool_size`` draws a seeded random subset instead). Files are read line by line;
a line longer than ``max_line_chars`` (default 2**20), a NUL byte or bytes that are not UTF-8
are refused naming the file and the line.

A sample is stored as int64 token ids ``[BOS, t_1, ..., t_T, -1, ...]`` (``-1`` pads to the
longest sample), so a model scores every one of its T tokens given the prefix; the pool's
content digest covers the ids, so another tokenizer or another text retrains every model.
Exact duplicates (same ids) are dropped, first kept: a member with a non-member copy has no
defined membership. The labels are all 0 (language modelling has none); ``num_classes`` is
the vocabulary size (what the model's output layer needs).
"""

from __future__ import annotations

import array
import csv
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from miaudit.data._base import DataError, DataSplits
from miaudit.registry import DATASETS

FORMATS = ("auto", "lines", "jsonl", "csv", "fortune")
UNITS = ("document", "chunk")
PAD = -1  # token id of padding: no vocabulary has it, so a model can tell it apart
BYTE_VOCAB = 257  # 256 byte values + the begin/end-of-text token


def require_text_extra(module: str) -> None:
    """One clear line when the optional text dependencies are missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ValueError(f"language models need the {module} package: pip install "
                         "'miaudit[text]' (transformers, peft, tokenizers)")


@dataclass(frozen=True)
class TextTokenizer:
    """What a text data set needs of a tokenizer: ids, text back, the boundary token."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    bos: int
    vocab_size: int


def byte_tokenizer() -> TextTokenizer:
    """UTF-8 bytes; the end-of-text token (between the documents of a chunk) decodes as a
    newline."""
    return TextTokenizer(
        encode=lambda text: list(text.encode("utf-8")),
        decode=lambda ids: bytes(10 if i == 256 else i for i in ids).decode("utf-8",
                                                                             errors="replace"),
        bos=256, vocab_size=BYTE_VOCAB)


def bpe_tokenizer(texts: list[str], vocab_size: int) -> TextTokenizer:
    """A byte-level BPE trained on ``texts`` (HF tokenizers; deterministic for given texts)."""
    require_text_extra("tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return TextTokenizer(encode=lambda text: tokenizer.encode(text).ids,
                         decode=lambda ids: tokenizer.decode(ids),
                         bos=tokenizer.token_to_id("<|endoftext|>"),
                         vocab_size=tokenizer.get_vocab_size())


def hf_tokenizer(path: Path) -> TextTokenizer:
    """A local HF tokenizer: a ``tokenizer.json`` file or a checkpoint folder (offline)."""
    require_text_extra("transformers")
    if not path.exists():
        raise ValueError(f"tokenizer {path} does not exist; give bytes, bpe:<vocab size>, or a "
                         "local tokenizer folder / tokenizer.json")
    if path.is_file():
        from tokenizers import Tokenizer

        try:
            raw = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises a bare Exception for any bad file
            raise DataError(f"tokenizer {path} is not a HF tokenizer.json ("
                            f"{str(error).splitlines()[0][:120]}); give the tokenizer.json or "
                            "checkpoint folder of the audited model, bytes, or "
                            "bpe:<vocab size>") from None
        bos = next((raw.token_to_id(t) for t in ("<|endoftext|>", "<s>", "<bos>", "[CLS]")
                    if raw.token_to_id(t) is not None), None)
        encode, decode, size = (lambda text: raw.encode(text, add_special_tokens=False).ids,
                                raw.decode, raw.get_vocab_size())
    else:
        from transformers import AutoTokenizer

        try:
            loaded = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DataError(f"tokenizer folder {path} holds no readable tokenizer ("
                            f"{str(error).splitlines()[0][:120]}); give the audited model's "
                            "checkpoint folder or its tokenizer.json") from None
        bos = loaded.bos_token_id if loaded.bos_token_id is not None else loaded.eos_token_id
        encode, decode, size = (lambda text: loaded.encode(text, add_special_tokens=False),
                                loaded.decode, len(loaded))
    if bos is None:
        raise ValueError(f"tokenizer {path} has no begin- or end-of-text token to start a "
                         "sample with")
    return TextTokenizer(encode=encode, decode=decode, bos=int(bos), vocab_size=int(size))


def make_tokenizer(spec: str, texts: list[str]) -> TextTokenizer:
    if spec == "bytes":
        return byte_tokenizer()
    if spec.startswith("bpe:"):
        size = spec.removeprefix("bpe:")
        if not size.isdigit() or not 260 <= int(size) <= 1_000_000:
            raise ValueError(f"tokenizer {spec!r}: give bpe:<vocab size>, a size of at least "
                             "260 (the 256 bytes, the end-of-text token and merges)")
        return bpe_tokenizer(texts, int(size))
    return hf_tokenizer(Path(spec).expanduser())


# -- reading documents --------------------------------------------------------------------------
def source_files(data_dir: Path, pattern: str) -> list[Path]:
    if data_dir.is_file():
        return [data_dir]
    if not data_dir.is_dir():
        raise DataError(f"text data: {data_dir} is neither a file nor a folder")
    files = sorted(p for p in data_dir.glob(pattern) if p.is_file())
    if not files:
        raise DataError(f"text data: no file in {data_dir} matches pattern {pattern!r}")
    return files


#: the longest line (characters) a text file may have: a file read line by line holds one line
#: at a time, and a "line" of hundreds of MB is a binary file or a corpus to split first
MAX_LINE_CHARS = 2**20


def read_documents(path: Path, fmt: str, field: str,
                   max_line_chars: int = MAX_LINE_CHARS) -> list[str]:
    """The documents of one file, in file order (empty ones left out), read line by line:
    a line longer than ``max_line_chars``, a NUL byte or bytes that are not UTF-8 raise
    DataError naming the file and the line."""
    if fmt == "auto":
        fmt = {".jsonl": "jsonl", ".csv": "csv"}.get(path.suffix.lower(), "lines")
    if fmt == "csv":
        documents = _csv_column(_lines(path, max_line_chars, ends=True), path, field)
    elif fmt == "fortune":
        documents, current = [], []
        for line in _lines(path, max_line_chars):
            if line.strip() == "%":
                documents.append("\n".join(current))
                current = []
            else:
                current.append(line)
        documents.append("\n".join(current))
    elif fmt == "jsonl":
        documents = [_json_field(line, path, number, field)
                     for number, line in enumerate(_lines(path, max_line_chars), 1)
                     if line.strip()]
    else:
        documents = [line for line in _lines(path, max_line_chars) if line.strip()]
    return [d for d in documents if d.strip()]


def _lines(path: Path, max_chars: int, ends: bool = False) -> Iterator[str]:
    """The lines of a UTF-8 file (as ``str.splitlines`` cuts them; with ``ends``, as read,
    newline kept), one at a time."""
    number = 0
    try:
        with open(path, encoding="utf-8") as stream:
            while line := stream.readline(max_chars + 1):
                number += 1
                if len(line) > max_chars and not line.endswith("\n"):
                    raise DataError(f"text data: {path} line {number} is longer than "
                                    f"{max_chars:,} characters (a binary file, or a corpus "
                                    "to split into lines first); raise data.options."
                                    "max_line_chars if it is meant")
                if "\0" in line:
                    raise DataError(f"text data: {path} line {number} holds a NUL byte: a "
                                    "binary file, not text")
                if ends:
                    yield line
                else:
                    yield from line.splitlines() or [""]
    except UnicodeDecodeError as error:
        raise DataError(f"text data: {path} is not UTF-8 text (after line {number}: "
                        f"{error})") from None
    except OSError as error:
        raise DataError(f"text data: cannot read {path}: {error}") from None


def _json_field(line: str, path: Path, number: int, field: str) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataError(f"text data: {path} line {number} is not JSON ({error})") from None
    if not isinstance(record, dict) or not isinstance(record.get(field), str):
        raise DataError(f"text data: {path} line {number} has no string field {field!r}; set "
                        "data.options.field")
    return record[field]


def _csv_column(lines: Iterator[str], path: Path, field: str) -> list[str]:
    try:
        reader = csv.DictReader(lines)
        if reader.fieldnames is None or field not in reader.fieldnames:
            raise DataError(f"text data: {path} has no column {field!r} (columns: "
                            f"{reader.fieldnames}); set data.options.field")
        return [row[field] or "" for row in reader]
    except csv.Error as error:  # e.g. a field over csv's own size limit
        raise DataError(f"text data: {path} line {reader.line_num}: {error}") from None


# -- samples ------------------------------------------------------------------------------------
def token_samples(documents: list[str], tokenizer: TextTokenizer, unit: str,
                  max_tokens: int) -> list[np.ndarray]:
    """int32 token-id arrays, one per sample (documents cut to ``max_tokens``, or chunks of
    it): 4 bytes a token, where lists of Python ints took 8 and more."""
    if unit == "document":
        samples = []
        for document in documents:
            ids = tokenizer.encode(document)[:max_tokens]
            if ids:
                samples.append(np.asarray(ids, dtype=np.int32))
        return samples
    stream = array.array("i")
    for document in documents:
        stream.extend(tokenizer.encode(document))
        stream.append(tokenizer.bos)
    tokens = np.frombuffer(stream, dtype=np.int32)
    count = len(tokens) // max_tokens
    return list(tokens[: count * max_tokens].reshape(count, max_tokens))  # views, no copy


def deduplicated(samples: list[np.ndarray]) -> list[np.ndarray]:
    """The samples with exact duplicates left out (the first kept), compared by a 128-bit
    digest of their ids (not a copy of each)."""
    seen, kept = set(), []
    for ids in samples:
        key = hashlib.blake2b(ids.tobytes(), digest_size=16).digest()
        if key not in seen:
            seen.add(key)
            kept.append(ids)
    return kept


def pack(samples: list[np.ndarray], bos: int) -> torch.Tensor:
    """(N, 1 + longest) int64: BOS, the sample's ids, then PAD."""
    width = 1 + max(len(ids) for ids in samples)
    packed = torch.full((len(samples), width), PAD, dtype=torch.int64)
    packed[:, 0] = bos
    for row, ids in enumerate(samples):
        packed[row, 1 : 1 + len(ids)] = torch.from_numpy(ids)
    return packed


def check_text(*, format: str, unit: str, max_tokens: int, max_line_chars: int = MAX_LINE_CHARS,
               **unchecked: object) -> None:
    """The text data set's option values (the config checks them before reading a file)."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 2:
        raise ValueError(f"max_tokens must be an integer >= 2, got {max_tokens!r}")
    if isinstance(max_line_chars, bool) or not isinstance(max_line_chars, int) \
            or max_line_chars < 1:
        raise ValueError(f"max_line_chars must be an integer >= 1, got {max_line_chars!r}")


@DATASETS.register("text", check=check_text)
def load_text(*, data_dir: Path | None, format: str = "auto", field: str = "text",
              pattern: str = "*.txt", unit: str = "document", max_tokens: int = 64,
              tokenizer: str = "bytes", max_samples: int | None = None,
              max_line_chars: int = MAX_LINE_CHARS) -> DataSplits:
    """Text documents or token chunks (lines, JSONL, CSV column, fortune files), tokenized."""
    if data_dir is None:
        raise ValueError("text data needs data_dir: a text file, or a folder of them")
    check_text(format=format, unit=unit, max_tokens=max_tokens, max_line_chars=max_line_chars)
    documents = [d for path in source_files(Path(data_dir), pattern)
                 for d in read_documents(path, format, field, max_line_chars)]
    encoder = make_tokenizer(str(tokenizer), documents)
    samples = deduplicated(token_samples(documents, encoder, unit, max_tokens))
    del documents  # the samples hold what is kept (peak memory: text ingestion is measured)
    if max_samples is not None:
        samples = samples[:max_samples]
    if len(samples) < 4:
        raise DataError(f"text data {data_dir}: {len(samples)} distinct sample(s); an audit "
                        "needs members and non-members (at least 4)")
    x = pack(samples, encoder.bos)
    empty = torch.zeros((0, x.shape[1]), dtype=torch.int64)
    return DataSplits(x_train=x, y_train=torch.zeros(len(x), dtype=torch.int64), x_test=empty,
                      y_test=torch.zeros(0, dtype=torch.int64), num_classes=encoder.vocab_size,
                      class_names=["text"],
                      texts=[encoder.decode(ids.tolist()) for ids in samples])
