#!/usr/bin/env python3
"""tests/scripts/text_data_check.py WORK TRAIN — real text end to end (scripts/prepare_data.py,
--val-data, --tokenizer, --prompt), with the Python that has the tokenizers library:

  1. prepare the project's own docs; the shards read back and decoded give exactly the
     input documents (split by document: each in train or val, none lost or doubled), and
     the manifest agrees with the shards;
  2. train on them with validation and the tokenizer: --vocab-size follows the manifest,
     the validation loss is printed and in the metrics (and plotted), the prompt's ids
     are the library's; exported as a Hugging Face folder, the model's loss on a text is
     what transformers computes on the same ids;
  3. bad input, one line each and a non-zero exit, nothing left behind: an empty file, a
     binary file, a tokenizer folder without tokenizer.json, an output folder in use, a
     manifest whose vocabulary is smaller than its shards' ids,
     a validation set smaller than one sequence, --prompt without --tokenizer, a tokenizer
     larger than --vocab-size, an unsupported tokenizer model.
Prints "text data ok" when every check holds.
"""
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

ROOT = Path(__file__).resolve().parents[2]
PREPARE = [sys.executable, str(ROOT / "scripts" / "prepare_data.py")]
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failures.append(what)


def read_shards(folder):
    tokens = []
    for f in sorted(Path(folder).glob("*.bin")):
        data = f.read_bytes()
        assert data[:8] == b"PICOTOK1", f
        width, _, n = struct.unpack("<IIQ", data[8:24])
        tokens += struct.unpack(f"<{n}{'H' if width == 2 else 'I'}", data[24:24 + n * width])
    return tokens


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, errors="replace", **kw)


def one_line_error(r, pattern, what):
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    check(r.returncode != 0 and len(lines) >= 1 and any(pattern in l for l in lines), f"{what}: non-zero exit, '{pattern}'")
    if r.returncode == 0 or not any(pattern in l for l in lines):
        print("   output:", (r.stdout + r.stderr)[-600:])


def main():
    work, train = Path(sys.argv[1]), sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    inputs = [ROOT / "README.md", ROOT / "docs"]
    out = work / "docs"

    # 1. Preparation, and the round trip.
    r = run(PREPARE + ["--input", *inputs, "--out", out, "--vocab-size", "1024", "--val-fraction", "0.1"])
    check(r.returncode == 0, "prepare_data runs: " + (r.stdout + r.stderr).strip()[-300:])
    manifest = json.loads((out / "manifest.json").read_text())
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    eos = manifest["end_of_text_id"]
    docs = {}
    for split in ("train", "val"):
        ids = read_shards(out / split)
        check(len(ids) == manifest["splits"][split]["tokens"], f"{split}: the manifest's token count is the shards'")
        check(max(ids) < manifest["vocab_size"], f"{split}: every id below the manifest's vocab_size")
        pieces, current = [], []
        for t in ids:
            if t == eos:
                pieces.append(tok.decode(current, skip_special_tokens=False))
                current = []
            else:
                current.append(t)
        check(not current and len(pieces) == manifest["splits"][split]["documents"], f"{split}: whole documents, each ended")
        docs[split] = pieces
    # The documents as prepare_data cuts them: every text file's blank-line-separated blocks.
    sys.path.insert(0, str(ROOT / "scripts"))
    import prepare_data  # noqa: E402
    expected = list(prepare_data.documents(prepare_data.input_files([str(p) for p in inputs])))
    check(sorted(docs["train"] + docs["val"]) == sorted(expected), "text -> ids -> text gives back every document")
    check(not set(docs["train"]) & set(docs["val"]) or len(set(expected)) < len(expected), "no document in both splits")
    check(len(docs["val"]) == round(0.1 * len(expected)), "the validation split holds --val-fraction of the documents")

    # 2. Training on it: the vocabulary follows the manifest, validation, text in and out.
    r = run([train, "--data", out / "train", "--val-data", out / "val", "--tokenizer", out, "--steps", "6",
             "--eval-every", "3", "--eval-batches", "2", "--seq-len", "32", "--micro-batch-size", "4", "--threads", "1",
             "--prompt", "The pipeline", "--generate", "4", "--metrics-file", work / "metrics.jsonl",
             "--export-hf", work / "hf"])
    text = r.stdout + r.stderr
    check(r.returncode == 0, "train with --val-data --tokenizer --prompt: " + text[-300:])
    check("V=1024" in text, "--vocab-size follows the manifest (1024)")
    check(sum(" | val " in l for l in text.splitlines()) == 2, "the validation loss on steps 3 and 6")
    ids_line = next((l for l in text.splitlines() if l.startswith("ids: ")), "")
    want = " ".join(map(str, tok.encode("The pipeline", add_special_tokens=False).ids))
    check(ids_line.startswith(f"ids: {want} ->"), f"the prompt's ids are the library's ({want})")
    rows = [json.loads(l) for l in (work / "metrics.jsonl").read_text().splitlines()]
    check([r["step"] for r in rows if "val_loss" in r] == [3, 6], "val_loss in the metrics on steps 3 and 6 only")
    r = run([sys.executable, ROOT / "scripts" / "plot_metrics.py", work / "metrics.jsonl", "-o", work / "curves.png"])
    check(r.returncode == 0 and (work / "curves.png").stat().st_size > 0, "plot_metrics.py draws train and validation")

    # 2b. The exported model as a Hugging Face folder with the tokenizer beside it: its loss
    #     on a text (tokenized by the library) is what transformers computes on the same ids,
    #     and --steps 0 --val-data reports a validation loss and perplexity.
    shutil.copy(out / "tokenizer.json", work / "hf" / "tokenizer.json")
    text_ids = Tokenizer.from_file(str(work / "hf" / "tokenizer.json")).encode(docs["val"][0], add_special_tokens=False).ids[:64]
    (work / "text.json").write_text(json.dumps({"input_ids": [text_ids]}))
    import torch  # noqa: E402
    from transformers import LlamaForCausalLM  # noqa: E402
    hf = LlamaForCausalLM.from_pretrained(work / "hf", torch_dtype=torch.float32)
    with torch.no_grad():
        ref = hf(torch.tensor([text_ids]), labels=torch.tensor([text_ids])).loss.item()
    r = run([train, "--init-from", work / "hf", "--tokenizer", work / "hf", "--steps", "0", "--eval", work / "text.json",
             "--val-data", out / "val", "--eval-batches", "2", "--seq-len", "32", "--threads", "1", "--generate", "0"])
    line = next((l for l in r.stdout.splitlines() if l.startswith("eval: loss ")), "eval: loss nan")
    ours = float(line.split()[2])
    check(abs(ours - ref) <= 1e-5 * abs(ref), f"an imported folder's loss on a text = transformers' ({ours:.7f} vs {ref:.7f})")
    check(any(l.startswith("validation loss ") and "perplexity" in l for l in r.stdout.splitlines()),
          "--steps 0 --val-data: the validation loss and perplexity")

    # 3. Bad input.
    (work / "empty.txt").write_text("")
    one_line_error(run(PREPARE + ["--input", work / "empty.txt", "--out", work / "e"]), "empty", "an empty input file")
    (work / "binary.txt").write_bytes(b"abc\0\1\2")
    one_line_error(run(PREPARE + ["--input", work / "binary.txt", "--out", work / "b"]), "looks binary", "a binary input file")
    check(not (work / "e").exists() and not (work / "b").exists(), "nothing written for bad input")
    (work / "no_tokenizer").mkdir()
    one_line_error(run(PREPARE + ["--input", ROOT / "README.md", "--out", work / "t", "--tokenizer", work / "no_tokenizer"]),
                   "no tokenizer.json", "a tokenizer folder without tokenizer.json")
    one_line_error(run(PREPARE + ["--input", ROOT / "README.md", "--out", out]), "not an empty folder", "an output folder in use")
    (work / "small.txt").write_text("hello there\n")
    one_line_error(run([train, "--data", out / "train", "--val-data", work / "small.txt", "--seq-len", "32", "--steps", "1"]),
                   f"--val-data {work / 'small.txt'}: has 12 tokens, fewer than --seq-len + 1 = 33",
                   "a validation set smaller than one sequence")
    bad = work / "bad_manifest"
    shutil.copytree(out, bad)
    m = json.loads((bad / "manifest.json").read_text())
    m["vocab_size"] = 300  # smaller than the ids the shards hold
    (bad / "manifest.json").write_text(json.dumps(m))
    one_line_error(run([train, "--data", bad / "train", "--steps", "1", "--seq-len", "32"]),
                   "but --vocab-size is 320", "a manifest that disagrees with its shards (ids beyond the vocabulary)")
    one_line_error(run([train, "--prompt", "hi", "--steps", "1"]), "--prompt needs --tokenizer", "--prompt without --tokenizer")
    one_line_error(run([train, "--tokenizer", out, "--vocab-size", "256", "--steps", "1"]),
                   "the tokenizer has 1024 entries but the model's vocab_size is 256", "a tokenizer larger than --vocab-size")
    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.Whitespace()
    wordpiece.save(str(work / "wordpiece.json"))
    one_line_error(run([train, "--tokenizer", work / "wordpiece.json", "--steps", "1"]),
                   "unsupported tokenizer model 'WordPiece'", "an unsupported tokenizer model")

    print("text data ok" if not failures else f"FAILED: {len(failures)} check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
