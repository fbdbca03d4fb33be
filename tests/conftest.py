import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.embedded import data, family
from core.embedded.train import TARGET
from core.models.gpt import GPT
from core.models.pair import ModelPair

torch.set_num_threads(1)  # small models are latency-bound; one thread never oversubscribes two cores


@pytest.fixture(scope="session")
def tokenizer():
    return family.load_tokenizer()


def tiny_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    cfg = dataclasses.replace(TARGET, **{**dict(dim=64, n_layer=2, n_head=2), **overrides})
    return GPT(cfg).eval()


@pytest.fixture(scope="session")
def tiny_pair(tokenizer):
    """A random tiny target on a 16x16 grid with the shipped tokenizer: fast, and sharp enough to reject."""
    target = tiny_gpt(0)
    small = tiny_gpt(1, n_layer=1)
    return ModelPair("tiny", target, target, small, tokenizer, (16, 16),
                            lambda prompt, grid: data.caption_ids(prompt, 32),
                            tokenizer.neighbours(tokenizer.vocab_size - 1), scales=(2, 4))


# mulo with the verify-time context: the cheapest mulo on a CPU, with drafter passes and acceptance
BENCH_ARGS = ["--prompts", "3", "--seed", "5", "--methods", "mulo:scale=4:context=verify,zipar:window=4", "--threads", "1"]


@pytest.fixture(scope="session")
def bench_folder(tmp_path_factory) -> Path:
    """A finished run folder of `python -m core bench` (one process), shared by the tests that read one."""
    out = tmp_path_factory.mktemp("bench") / "one"
    done = subprocess.run([sys.executable, "-m", "core", "bench", *BENCH_ARGS, "--out", str(out),
                           "--json", str(out.parent / "one.json")], cwd=Path(__file__).resolve().parent.parent,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (minutes each)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: minutes long; skipped unless pytest is given --slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="slow: run with --slow"))


class PassCounter:
    """Wraps a model's forward entry points and counts the passes actually made."""

    def __init__(self, gpt, monkeypatch):
        self.n = 0
        for name in ("prefill", "forward_cells", "step_one"):
            original = getattr(gpt, name)

            def counted(*a, _f=original, **kw):
                self.n += 1
                return _f(*a, **kw)
            monkeypatch.setattr(gpt, name, counted)
