"""Typed configuration of `scalerl data`: where prompts come from and how they are filtered.

A YAML file for `scalerl data --config` is a `DataConfig` mapping, e.g.

    sources:
      - {kind: synthetic_math, n: 4000, seed: 0, difficulties: [1, 2, 3, 4]}
      - {kind: synthetic_code, n: 1000, seed: 0}
      - {kind: file, task: math, format: polaris, path: data/polaris-53k.jsonl}
      - {kind: file, task: math, path: data/other.parquet, limit: 0,
         columns: {prompt: question, answer: final}}
      - {kind: hub, task: code, format: deepcoder,
         dataset: agentica-org/DeepCoder-Preview-Dataset, config_name: lcbv5, split: train}
    val_size: 200
    filters: {ngram_n: 13, max_prompt_chars: 4096}

Deliberately left out: per-source sampling weights (give counts / limits instead).
"""

from __future__ import annotations

import dataclasses

from scalerl.config import Config, ConfigError, field_
from scalerl.tasks.loaders import FORMATS

__all__ = ["SourceConfig", "FilterConfig", "DataConfig"]


@dataclasses.dataclass(frozen=True)
class SourceConfig(Config):
    """One prompt source: a synthetic generator, a local file or a Hugging Face dataset."""

    kind: str = field_("synthetic_math", "synthetic_math | synthetic_code | file | hub",
                       choices=("synthetic_math", "synthetic_code", "file", "hub"))
    n: int = field_(1000, "synthetic: number of examples to generate", ge=0)
    seed: int = field_(0, "synthetic: generator seed")
    difficulties: tuple[int, ...] = field_((1, 2, 3, 4), "synthetic: difficulty levels, "
                                           "interleaved evenly (math 1-6, lin 1-4; code 1-4)")
    families: tuple[str, ...] = field_(("add", "sub", "mul", "lin"),
                                       "synthetic_math: families (add, sub, mul, lin, chain, wchain)")
    code_variant: str = field_("ranged", "synthetic_code: 'ranged' (parameters from ranges, a "
                               "def answer) or 'binary' (two values per parameter, a lambda "
                               "answer, examples that determine the program); "
                               "scalerl.tasks.synthetic", choices=("ranged", "binary"))
    task: str = field_("math", "file/hub: math or code", choices=("math", "code"))
    path: str = field_("", "file: a .parquet, .jsonl or .json file")
    dataset: str = field_("", "hub: dataset id, e.g. POLARIS-Project/Polaris-Dataset-53K")
    config_name: str = field_("", "hub: dataset configuration (subset), '' for none")
    split: str = field_("train", "hub: dataset split")
    format: str = field_("", "file/hub: upstream dataset format setting the default columns "
                         "(polaris, deepcoder, taco, apps; test programs: humaneval, mbpp, "
                         "acecode, kodcode; see scalerl.tasks.loaders.FORMATS); "
                         "'' = the generic defaults", choices=("", *FORMATS))
    name: str = field_("", "file/hub: value of the `source` column ('' = file stem / dataset)")
    limit: int = field_(0, "file/hub: keep the first `limit` rows (0 = all)", ge=0)
    columns: dict[str, str] = field_(
        default_factory=dict, doc="file/hub: canonical key -> dataset column (prompt, answer, "
        "tests, fn_name, starter_code, id, difficulty, solution; test programs also "
        "entry_point, setup, test_info); defaults in scalerl.tasks.loaders")

    def validate(self) -> None:
        super().validate()
        if self.kind == "file" and not self.path:
            raise ConfigError("path is required for kind: file (a .parquet, .jsonl or .json file)")
        if self.kind == "hub" and not self.dataset:
            raise ConfigError("dataset is required for kind: hub (a Hugging Face dataset id)")
        if self.format:
            if FORMATS[self.format][0] != self.task:
                raise ConfigError(f"format: {self.format} is a {FORMATS[self.format][0]} "
                                  f"dataset; set task: {FORMATS[self.format][0]}")


@dataclasses.dataclass(frozen=True)
class FilterConfig(Config):
    """Filters applied after loading; each drop is counted by reason in the report."""

    dedupe: bool = field_(True, "drop exact and normalised (case, whitespace) duplicate prompts")
    decontaminate: bool = field_(True, "drop train prompts sharing a word n-gram with val or "
                                 "eval-set prompts")
    ngram_n: int = field_(13, "n of the word n-grams for decontamination (prompts shorter than "
                          "n words are compared as a whole contiguous word sequence)", ge=1)
    eval_sets: tuple[str, ...] = field_((), "extra prompt files (parquet/jsonl/json with a "
                                        "`prompt` or `problem` column) to decontaminate against")
    min_prompt_chars: int = field_(1, "drop prompts shorter than this", ge=0)
    max_prompt_chars: int = field_(4096, "drop prompts longer than this", ge=1)
    check_answers: bool = field_(True, "math: drop rows whose answer does not parse (verified "
                                 "equal to itself by the math verifier)")
    check_solutions: bool = field_(True, "drop rows whose reference solution fails (code: its "
                                   "tests in the sandbox; math: its boxed answer)")
    verify_workers: int = field_(2, "parallel verifier / sandbox workers", ge=1)
    min_pass_rate: float = field_(0.0, "with a pass_rate_fn: drop train prompts below", ge=0, le=1)
    max_pass_rate: float = field_(1.0, "with a pass_rate_fn: drop train prompts above", ge=0, le=1)
    dataset_pass_rate: bool = field_(False, "difficulty filter on the pass rate the dataset "
                                     "records (Polaris difficulty 'k/n' -> k/n) for rows that "
                                     "have one, before any pass_rate_fn; other rows are kept")


def _default_sources() -> tuple[SourceConfig, ...]:
    return (SourceConfig(kind="synthetic_math", n=4000),
            SourceConfig(kind="synthetic_code", n=1000))


@dataclasses.dataclass(frozen=True)
class DataConfig(Config):
    """`scalerl data`: sources -> filters -> deterministic train/val split -> prompts.parquet."""

    sources: tuple[SourceConfig, ...] = field_(default_factory=_default_sources,
                                               doc="prompt sources, concatenated in order")
    val_size: int = field_(200, "held-out validation prompts (paper: 1,000), allocated to "
                           "sources in proportion to their size", ge=0)
    split_seed: int = field_(0, "seed of the deterministic train/val assignment")
    filters: FilterConfig = field_(default_factory=FilterConfig, doc="filters (see FilterConfig)")
    skip_malformed: bool = field_(False, "skip and count malformed rows instead of failing")

    def validate(self) -> None:
        super().validate()
        if not self.sources:
            raise ConfigError("sources is empty; give at least one source")
        if self.filters.min_pass_rate > self.filters.max_pass_rate:
            raise ConfigError("filters.min_pass_rate must be <= filters.max_pass_rate")
