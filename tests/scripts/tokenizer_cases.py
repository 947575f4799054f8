#!/usr/bin/env python3
"""tests/scripts/tokenizer_cases.py OUT_DIR TOKENIZER_CHECK [TEXT_FILE...]

Builds three byte-level BPE tokenizers with the Hugging Face `tokenizers` library, each
trained on the given text files (the project's own docs; nothing is downloaded), in the
three pre-tokenizer styles runtime/text/tokenizer.h supports:
  gpt2    ByteLevel with GPT-2's split regex (what scripts/prepare_data.py trains)
  llama3  Split with Llama-3's regex (Isolated), then ByteLevel without a regex;
          ignore_merges as Llama-3 sets it
  smollm  Digits (each digit alone), then ByteLevel with GPT-2's regex (SmolLM's)
then encodes real text (every paragraph of the files, and a few hard cases: Unicode,
emoji, digits, contractions, spaces and newlines, an added token) with the library and
runs TOKENIZER_CHECK on each; prints "tokenizers ok" when all three agree.
"""
import json
import subprocess
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
HARD = ["Hello world! It's 2026; we'll see. I'm ok, they've gone, you'd know.",
        "Ünïcödé: naïve café, 東京 2024年, Ελληνικά, русский текст.",
        "emoji 🙂🚀 and\ttabs\n\nnew   lines   with    spaces  \n  trailing   ",
        "numbers 1234567890 3.14159 -42 1e10 0x1F",
        "an added token <|endoftext|> in the middle<|endoftext|>",
        "   ", "a", "<|endoftext|>"]


def build(style, texts):
    tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    elif style == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def main():
    out, check, files = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    paragraphs = [p for f in files for p in Path(f).read_text().split("\n\n") if p.strip()]
    ok = True
    for style in ("gpt2", "llama3", "smollm"):
        tok = build(style, paragraphs)
        tok.save(str(out / f"{style}.json"))
        texts = paragraphs + HARD
        cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]
        (out / f"{style}.cases.json").write_text(json.dumps(cases))
        r = subprocess.run([check, str(out / f"{style}.json"), str(out / f"{style}.cases.json")],
                           capture_output=True, text=True)
        print(f"{style}: {r.stdout.strip()}")
        ok &= r.returncode == 0
    print("tokenizers ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
