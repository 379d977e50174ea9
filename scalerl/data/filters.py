"""Pure filtering functions of the dataset build: duplicates, n-gram overlap, split, length.

- `normalize_prompt`: lower case, whitespace collapsed - the key for normalised duplicates;
- `ngram_index` / `is_contaminated`: word n-gram overlap (13-grams by default, the common
  decontamination choice of GPT-3 and later reports). A prompt with fewer than n words is
  compared as its whole word sequence, which must then occur contiguously in the other text,
  so short templated prompts (synthetic `47+385=`) only match real repeats;
- `split_by_hash`: a deterministic train/val assignment that depends only on the seed and the
  prompt ids, with the val size allocated to groups (sources) by largest remainder.

Deliberately left out: fuzzy (MinHash) near-duplicate detection and embedding similarity.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence

__all__ = ["normalize_prompt", "NgramIndex", "ngram_index", "is_contaminated", "split_by_hash",
           "allocate"]


def normalize_prompt(prompt: str) -> str:
    return " ".join(prompt.lower().split())


def _words(text: str) -> list[str]:
    return text.lower().split()


class NgramIndex:
    """Word n-grams of reference texts, plus whole short references (fewer than n words)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.grams: set[tuple[str, ...]] = set()
        self.short: dict[int, set[tuple[str, ...]]] = defaultdict(set)
        self._long: list[list[str]] = []
        self._kgrams: dict[int, set[tuple[str, ...]]] = {}  # k < n: k-grams of long references

    def add(self, text: str) -> None:
        words = _words(text)
        if not words:
            return
        if len(words) < self.n:
            self.short[len(words)].add(tuple(words))
        else:
            self.grams.update(_grams(words, self.n))
            self._long.append(words)
            self._kgrams.clear()

    def kgrams(self, k: int) -> set[tuple[str, ...]]:
        """All k-grams of the long references (built on first use), for short query texts."""
        if k not in self._kgrams:
            self._kgrams[k] = {g for words in self._long for g in _grams(words, k)}
        return self._kgrams[k]


def _grams(words: list[str], k: int) -> Iterable[tuple[str, ...]]:
    return (tuple(words[i:i + k]) for i in range(len(words) - k + 1))


def ngram_index(texts: Iterable[str], n: int) -> NgramIndex:
    index = NgramIndex(n)
    for t in texts:
        index.add(t)
    return index


def is_contaminated(text: str, index: NgramIndex) -> bool:
    """True when `text` shares an n-gram with a reference, contains a whole short reference,
    or (being shorter than n words) occurs whole inside a reference."""
    words = _words(text)
    if not words:
        return False
    if len(words) >= index.n:
        if any(g in index.grams for g in _grams(words, index.n)):
            return True
    elif tuple(words) in index.short[len(words)] or tuple(words) in index.kgrams(len(words)):
        return True
    return any(len(words) > k and any(g in refs for g in _grams(words, k))
               for k, refs in index.short.items())


def allocate(total: int, sizes: Sequence[int]) -> list[int]:
    """Split `total` over groups in proportion to `sizes` (largest remainder, ties by order)."""
    whole = sum(sizes)
    if total > whole:
        raise ValueError(f"val_size {total} exceeds the {whole} prompts left after filtering; "
                         "lower val_size or add prompts")
    if whole == 0:
        return [0] * len(sizes)
    quotas = [total * s / whole for s in sizes]
    counts = [int(q) for q in quotas]
    order = sorted(range(len(sizes)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _rank(seed: int, prompt_id: str) -> str:
    return hashlib.sha256(f"{seed}\x00{prompt_id}".encode()).hexdigest()


def split_by_hash(ids: Sequence[str], groups: Sequence[str], val_size: int,
                  seed: int) -> list[str]:
    """'train' / 'val' for each id; each group gets its share of `val_size` (see `allocate`),
    taken as the ids with the smallest sha256(seed, id)."""
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    names = list(members)
    quota = allocate(val_size, [len(members[g]) for g in names])
    split = ["train"] * len(ids)
    for g, k in zip(names, quota):
        for i in sorted(members[g], key=lambda i: _rank(seed, ids[i]))[:k]:
            split[i] = "val"
    return split
