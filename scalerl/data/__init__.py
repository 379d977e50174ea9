"""Dataset build and filtering: `build_prompts(DataConfig) -> (DataFrame, report)`, the
prompts.parquet reader/writer, and `scalerl data` (scalerl.data.cli)."""

from scalerl.data.build import DROP_REASONS, build_prompts, load_source
from scalerl.data.config import DataConfig, FilterConfig, SourceConfig
from scalerl.data.io import PROMPT_COLUMNS, prompts_metadata, read_prompts, write_prompts

__all__ = ["build_prompts", "load_source", "DROP_REASONS", "DataConfig", "FilterConfig",
           "SourceConfig", "PROMPT_COLUMNS", "read_prompts", "write_prompts", "prompts_metadata"]
