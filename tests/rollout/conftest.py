"""Fixtures shared by the engine tests: one tiny-s model directory per module and the same
model loaded for the trainer-side recomputation of log-probabilities."""

import pytest

from scalerl.models.config import ModelConfig
from scalerl.models.loading import build_tiny_model, load_model, new_tiny_tokenizer, save_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    save_model_dir(build_tiny_model(ModelConfig(name="tiny-s", seed=1)), new_tiny_tokenizer(), path)
    return path


@pytest.fixture(scope="module")
def model(model_dir):
    return load_model(model_dir, ModelConfig(name=str(model_dir)))
