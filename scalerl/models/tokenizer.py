"""The character-level tokenizer of the tiny models, saved as a Hugging Face fast tokenizer.

Vocabulary (ids are fixed, so every tiny model shares them):

    0 <pad>   1 <bos>   2 <eos>   3 <unk>   4 <think>   5 </think>   6 \\boxed{
    7 "\\n"   8.. every printable ASCII character from " " (32) to "~" (126)

That is 7 + 1 + 95 = 103 tokens. `<think>`, `</think>` and `\\boxed{` are *added tokens that are
not special*: the tokenizer matches them before splitting into characters, so each is one token,
and decoding keeps them (`skip_special_tokens=True` drops only pad/bos/eos/unk, which is what
vLLM's detokenizer does too). Everything else is one token per character (a `WordLevel` model
over single characters, a `Split` pre-tokenizer that isolates every character and a `Fuse`
decoder that joins them without spaces), so `decode(encode(text)) == text` for any printable
ASCII text with newlines.

The directory written by `save_char_tokenizer` loads with `AutoTokenizer.from_pretrained(dir)`
and with vLLM. Deliberately left out: byte fallback for non-ASCII text (task text is printable
ASCII by contract; anything else maps to `<unk>`) and a chat template (tiny models use raw
prompts: bos + prompt).
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from scalerl.text import BOXED_OPEN, THINK_CLOSE, THINK_OPEN

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
TASK_TOKENS = (THINK_OPEN, THINK_CLOSE, BOXED_OPEN)
# "\n" followed by the 95 printable ASCII characters (string.printable minus \t\r\x0b\x0c).
CHARACTERS = ("\n",) + tuple(chr(c) for c in range(32, 127))


def char_vocab() -> dict[str, int]:
    """token -> id for the whole vocabulary (specials, task tokens, characters)."""
    tokens = SPECIAL_TOKENS + TASK_TOKENS + CHARACTERS
    assert len(set(tokens)) == len(tokens)
    assert set(CHARACTERS) == set(string.printable) - set("\t\r\x0b\x0c")
    return {tok: i for i, tok in enumerate(tokens)}


VOCAB_SIZE = len(char_vocab())  # 103


def build_char_tokenizer():
    """A `PreTrainedTokenizerFast` over `char_vocab()` (no files written)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = char_vocab()
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # "[\s\S]" matches every single character including "\n"; "isolated" keeps each piece.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    core.add_tokens([AddedToken(t, special=False, normalized=False) for t in TASK_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        padding_side="left",
        model_max_length=4096,
    )
    # Adding tokens must not have changed ids (WordLevel already holds them).
    for t, i in vocab.items():
        assert tok.convert_tokens_to_ids(t) == i, (t, i)
    return tok


def save_char_tokenizer(directory: str | Path):
    """Write the tokenizer files (tokenizer.json, tokenizer_config.json, ...) into `directory`."""
    tok = build_char_tokenizer()
    tok.save_pretrained(str(directory))
    # transformers 5 writes its internal class name; the generic name loads in 4.x and 5.x alike.
    config_path = Path(directory) / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return tok
