"""The character tokenizer: fixed ids, single-token task markers, exact round trips, HF loading."""

import json
import string

from transformers import AutoTokenizer

from scalerl.models.tokenizer import (
    VOCAB_SIZE,
    build_char_tokenizer,
    char_vocab,
    save_char_tokenizer,
)


def test_vocab_layout():
    vocab = char_vocab()
    # 4 specials + 3 task tokens + "\n" + 95 printable characters (32..126) = 103.
    assert VOCAB_SIZE == 103 == len(vocab)
    assert [vocab[t] for t in ("<pad>", "<bos>", "<eos>", "<unk>")] == [0, 1, 2, 3]
    assert [vocab[t] for t in ("<think>", "</think>", "\\boxed{")] == [4, 5, 6]
    assert vocab["\n"] == 7 and vocab[" "] == 8 and vocab["~"] == 102


def test_round_trip_and_single_token_markers():
    tok = build_char_tokenizer()
    text = "<think>7+5+0=12 4+8+1=13\n</think>\\boxed{432}"
    ids = tok.encode(text, add_special_tokens=False)
    # <think> + 15 chars ("7+5+0=12 4+8+1=") + "13" + "\n" + </think> + \boxed{ + "432}"
    assert ids[0] == 4 and 5 in ids and 6 in ids
    assert len(ids) == 1 + len("7+5+0=12 4+8+1=13\n") + 1 + 1 + len("432}")
    assert tok.decode(ids) == text
    every = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
    assert tok.decode(tok.encode(every, add_special_tokens=False)) == every
    # spaces are kept exactly (no clean-up of " ," etc.)
    assert tok.decode(tok.encode("a , b  c", add_special_tokens=False)) == "a , b  c"


def test_special_tokens_dropped_on_request_but_task_markers_kept():
    tok = build_char_tokenizer()
    ids = [1] + tok.encode("<think>x</think>", add_special_tokens=False) + [2, 0]
    assert tok.decode(ids, skip_special_tokens=True) == "<think>x</think>"
    assert tok.encode("é", add_special_tokens=False) == [3]  # non-ASCII -> <unk>


def test_saved_directory_loads_with_auto_tokenizer(tmp_path):
    save_char_tokenizer(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert len(tok) == VOCAB_SIZE
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 0)
    # printable character c has id 8 + ord(c) - 32: "1" -> 25, "2" -> 26, "}" -> 101
    assert tok.encode("\\boxed{12}", add_special_tokens=False) == [6, 25, 26, 101]
