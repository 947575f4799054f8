#!/usr/bin/env python3
"""scripts/prepare_data.py — text in, token shards out (nanoGPT's and llm.c's convention).

    python scripts/prepare_data.py --input README.md docs --out data/docs --vocab-size 1024
    python scripts/prepare_data.py --input corpus/ --out data/c --tokenizer path/to/SmolLM-135M

Inputs: text files, or folders (every text file under them, in name order; files there
that are empty, binary or not UTF-8 are skipped and counted; named files must be text).
Each input is cut
into documents at blank lines; the documents are split into train and validation by a
seeded draw (--val-fraction of them, at least one each when there are two or more), so
no document is in both. Writes:

    OUT/train/000000.bin ...   PICOTOK1 token shards (picotron/data.h), at most
    OUT/val/000000.bin ...     --shard-tokens tokens each; each document ends with the
                               end-of-text token when the tokenizer has one
    OUT/tokenizer.json         the tokenizer (build/train --tokenizer OUT reads it)
    OUT/manifest.json          tokenizer, vocabulary size, token and document counts, shards

The tokenizer is a Hugging Face folder holding tokenizer.json, or that file itself
(--tokenizer), or, without one, a byte-level BPE trained on these documents with
--vocab-size entries (the Hugging Face `tokenizers` library; nothing is downloaded).
Encoding runs in the library's threads, a batch of documents at a time, and the shards
are written as they fill: memory is bounded by a batch and a shard, not the corpus.
Shards are written under temporary names and renamed at the end: a failed run leaves
no shard behind. Then:

    build/train --data OUT/train --val-data OUT/val --tokenizer OUT --eval-every 50 ...
"""
import argparse
import json
import os
import random
import shutil
import struct
import sys
from pathlib import Path

MAGIC = b"PICOTOK1"
END_OF_TEXT = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")  # the first the tokenizer knows


def fail(message):
    print(f"prepare_data: error: {message}", file=sys.stderr)
    sys.exit(1)


def text_problem(path):
    """Why `path` is not a text file we can read, or None."""
    data = path.read_bytes()
    if not data.strip():
        return "empty (no text to tokenize)"
    if b"\0" in data[:65536]:
        return "looks binary (a NUL byte): give text files"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 text (byte {e.start}): give text files"
    return None


def input_files(paths):
    files, skipped = [], 0
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file())
            text = [f for f in found if text_problem(f) is None]
            skipped += len(found) - len(text)
            if not text:
                fail(f"{p}: the folder holds no text files")
            files += text
        elif p.is_file():
            problem = text_problem(p)
            if problem:
                fail(f"{p}: {problem}")
            files.append(p)
        else:
            fail(f"{p}: no such file or folder")
    if skipped:
        print(f"prepare_data: skipped {skipped} file(s) in the folders that are empty, binary or not UTF-8", file=sys.stderr)
    return files


def read_text(path):
    return path.read_bytes().decode("utf-8")


def documents(files):
    """Every document of every file, in order: text between blank lines."""
    for f in files:
        block = []
        for line in read_text(f).splitlines():
            if line.strip():
                block.append(line)
            elif block:
                yield "\n".join(block) + "\n"
                block = []
        if block:
            yield "\n".join(block) + "\n"


def load_tokenizer(spec):
    from tokenizers import Tokenizer

    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        fail(f"{spec}: no tokenizer.json there (give a Hugging Face folder that holds one, or the file)")
    try:
        return Tokenizer.from_file(str(path)), str(path)
    except Exception as e:  # the library's own words
        fail(f"{path}: not a tokenizer the tokenizers library reads: {e}")


def train_tokenizer(docs, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


class ShardWriter:
    """PICOTOK1 shards of at most `limit` tokens, under temporary names until commit()."""

    def __init__(self, folder, limit, bytes_per_token):
        self.folder, self.limit, self.width = folder, limit, bytes_per_token
        self.code = "H" if bytes_per_token == 2 else "I"
        self.pending, self.done, self.tokens, self.documents = [], [], 0, 0
        self.file, self.in_file = None, 0
        folder.mkdir(parents=True, exist_ok=True)

    def _open(self):
        path = self.folder / f"{len(self.done) + len(self.pending):06d}.bin.tmp"
        self.file = open(path, "wb")
        self.file.write(MAGIC + struct.pack("<IIQ", self.width, 0, 0))  # the count is written at close
        self.pending.append(path)
        self.in_file = 0

    def _close(self):
        self.file.seek(16)
        self.file.write(struct.pack("<Q", self.in_file))
        self.file.close()
        self.file = None

    def add(self, ids):
        self.documents += 1
        while ids:
            if self.file is None:
                self._open()
            room = self.limit - self.in_file
            chunk, ids = ids[:room], ids[room:]
            self.file.write(struct.pack(f"<{len(chunk)}{self.code}", *chunk))
            self.in_file += len(chunk)
            self.tokens += len(chunk)
            if self.in_file == self.limit:
                self._close()

    def commit(self):
        if self.file is not None:
            self._close()
        for tmp in self.pending:
            final = tmp.with_suffix("")  # 000000.bin.tmp -> 000000.bin
            os.replace(tmp, final)
            self.done.append(final.name)
        self.pending = []


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", nargs="+", required=True, help="text files or folders")
    p.add_argument("--out", required=True, help="the output folder (must be empty or new)")
    p.add_argument("--tokenizer", help="a Hugging Face folder with tokenizer.json, or the file; default: train one")
    p.add_argument("--vocab-size", type=int, default=4096, help="the trained tokenizer's vocabulary (default 4096)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="documents held out for validation (default 0.1)")
    p.add_argument("--shard-tokens", type=int, default=50_000_000, help="tokens per shard (default 50M)")
    p.add_argument("--batch-documents", type=int, default=1024, help="documents encoded at a time (default 1024)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the train/val split")
    a = p.parse_args()
    if not 0 <= a.val_fraction < 1:
        fail(f"--val-fraction must be in [0, 1), got {a.val_fraction}")
    if a.shard_tokens < 1 or a.batch_documents < 1:
        fail("--shard-tokens and --batch-documents must be positive")
    if a.tokenizer is None and not 256 + 1 <= a.vocab_size <= 1 << 20:
        fail(f"--vocab-size must be in [257, 1048576] (256 bytes + the end-of-text token at least), got {a.vocab_size}")
    out = Path(a.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"{out}: exists and is not an empty folder (nothing is overwritten)")
    files = input_files(a.input)
    try:
        from tqdm import tqdm
    except ImportError:  # no progress bar, the same result
        def tqdm(it, **kw):
            return it

    # Pass 1: count the documents (and check every file) and draw the split.
    n = sum(1 for _ in documents(files))
    order = list(range(n))
    random.Random(a.seed).shuffle(order)
    n_val = min(n - 1, max(1 if n > 1 and a.val_fraction > 0 else 0, round(a.val_fraction * n)))
    val = set(order[:n_val])

    if a.tokenizer:
        tok, source = load_tokenizer(a.tokenizer)
    else:
        tok = train_tokenizer(tqdm(documents(files), total=n, desc="training the tokenizer", unit="doc",
                                   disable=not sys.stderr.isatty()), a.vocab_size)
        source = f"trained here: byte-level BPE, {tok.get_vocab_size()} entries"
    tok.encode_special_tokens = True  # a document that quotes "<|endoftext|>" gets its characters, not the token
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos = next((tok.token_to_id(t) for t in END_OF_TEXT if tok.token_to_id(t) is not None), None)
    width = 2 if vocab <= 1 << 16 else 4

    out.mkdir(parents=True, exist_ok=True)
    writers = {"train": ShardWriter(out / "train", a.shard_tokens, width),
               "val": ShardWriter(out / "val", a.shard_tokens, width)}
    try:
        batch = []

        def flush():
            for (split, _), enc in zip(batch, tok.encode_batch([d for _, d in batch], add_special_tokens=False)):
                writers[split].add(enc.ids + ([eos] if eos is not None else []))
            batch.clear()

        for i, doc in enumerate(tqdm(documents(files), total=n, desc="tokenizing", unit="doc",
                                     disable=not sys.stderr.isatty())):
            batch.append(("val" if i in val else "train", doc))
            if len(batch) == a.batch_documents:
                flush()
        flush()
        for w in writers.values():
            w.commit()
        tok.encode_special_tokens = False  # (the saved tokenizer behaves as the library's default)
        tok.save(str(out / "tokenizer.json"))
        manifest = {
            "format": "PICOTOK1 (picotron/data.h)", "tokenizer": "tokenizer.json", "tokenizer_source": source,
            "vocab_size": vocab, "end_of_text_id": eos, "bytes_per_token": width,
            "inputs": [str(f) for f in files], "val_fraction": a.val_fraction, "seed": a.seed,
            "splits": {s: {"documents": w.documents, "tokens": w.tokens, "shards": w.done} for s, w in writers.items()},
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # nothing half-written stays
        raise
    t, v = writers["train"], writers["val"]
    print(f"prepare_data: {out}: {len(files)} file(s), {n} documents; train {t.tokens:,} tokens in {len(t.done)} shard(s), "
          f"val {v.tokens:,} tokens in {len(v.done)} shard(s) ({v.documents} documents); vocabulary {vocab} ({source})")


if __name__ == "__main__":
    main()
