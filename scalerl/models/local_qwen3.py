"""A small Qwen3-architecture model directory built locally: no download, seeded.

`build_local_qwen3(out, texts, ...)` writes a Hugging Face model directory (config.json,
model.safetensors, generation_config.json, tokenizer files) of a `transformers.Qwen3Config`
model with small dimensions and its own tokenizer:

- tokenizer: byte-level BPE (`tokenizers`) trained on `texts` (e.g. the synthetic prompts and
  solutions), with Qwen3's special tokens `<|endoftext|>` (pad), `<|im_start|>`,
  `<|im_end|>` (eos) and the thinking markers `<think>` / `</think>` as single, non-special
  tokens (decoded text keeps them, as with Qwen3), and a Qwen3-style chat template (one
  `<|im_start|>role\\ncontent<|im_end|>\\n` block per turn, `<|im_start|>assistant\\n` as the
  generation prompt), so `prompt_format: chat` applies;
- model: random weights from `seed`; with `sft_examples` (TaskExamples) a short full-batch
  teacher-forcing warm start on `chat(prompt) -> solution <|im_end|>` so sampled rewards
  have variance inside a group (RL tests need a policy that is right sometimes); on
  `sft_device` (cuda for the larger shapes of benchmarks/gpu_check.sh), saved from the CPU.

It stands in for Qwen/Qwen3-0.6B in the CPU end-to-end tests and in benchmarks/gpu_check.sh:
the same modelling code (QK-norm, GQA, tied head), the same prompt format and thinking tokens,
a vocabulary of a few hundred tokens. `max_positions` sets `max_position_embeddings`, which
vLLM takes as max_model_len.

Deliberately left out: Qwen3's real vocabulary and weights (tests download nothing) and a
tokenizer that reproduces Qwen3's ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CHAT_TEMPLATE", "LocalQwen3", "build_local_qwen3", "train_chat_tokenizer"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
THINK_TOKENS = ("<think>", "</think>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclasses.dataclass(frozen=True)
class LocalQwen3:
    """Shape of the local model (defaults: ~0.1M parameters, vLLM CPU's head size 32)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 32
    intermediate: int = 128
    vocab_size: int = 384  # BPE target; the tokenizer may end up smaller
    max_positions: int = 8192
    seed: int = 0


def train_chat_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE `PreTrainedTokenizerFast` with the chat and thinking tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(list(texts), trainer=trainer)
    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _warm_start(model, tokenizer, examples: Sequence[Any], steps: int, lr: float,
                device: str) -> None:
    """Full-batch teacher forcing on chat(prompt) -> solution + eos (the loss on the answer)."""
    import torch

    eos = tokenizer.eos_token_id
    pairs = []
    for ex in examples:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": ex.prompt}],
                                               add_generation_prompt=True, tokenize=True,
                                               return_dict=False)
        pairs.append((list(prompt), tokenizer.encode(ex.solution, add_special_tokens=False)
                      + [eos]))
    width = max(len(p) + len(t) for p, t in pairs)
    ids = torch.full((len(pairs), width), tokenizer.pad_token_id)  # [N, W]
    mask = torch.zeros(len(pairs), width, dtype=torch.long)  # [N, W]
    labels = torch.full((len(pairs), width), -100)  # [N, W]
    for i, (p, t) in enumerate(pairs):
        ids[i, :len(p) + len(t)] = torch.tensor(p + t)
        mask[i, :len(p) + len(t)] = 1
        labels[i, len(p):len(p) + len(t)] = torch.tensor(t)
    ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.to("cpu").eval()


def build_local_qwen3(out: str | Path, texts: Iterable[str], shape: LocalQwen3 = LocalQwen3(),
                      *, sft_examples: Sequence[Any] = (), sft_steps: int = 0,
                      sft_lr: float = 3e-3, sft_device: str = "cpu") -> Path:
    """Write the model directory `out` (atomically) and return it (module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3Config

    from scalerl.utils.io import atomic_path

    texts = list(texts) + [ex.prompt for ex in sft_examples] + [ex.solution
                                                                 for ex in sft_examples]
    tokenizer = train_chat_tokenizer(texts, shape.vocab_size)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim, intermediate_size=shape.intermediate,
        max_position_embeddings=shape.max_positions, tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(shape.seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        if sft_examples and sft_steps:
            _warm_start(model, tokenizer, sft_examples, sft_steps, sft_lr, sft_device)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id)
    out = Path(out)
    with atomic_path(out, directory=True) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out
