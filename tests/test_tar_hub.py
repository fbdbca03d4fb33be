"""Tar pairs on a Hugging Face Space: offered without their files, fetched through huggingface_hub into
its cache, loaded from it and run. The hub cache is prepared here, offline, with the bytes of
tar.write_tiny's official-layout files, so huggingface_hub's own download calls run and resolve from
it; nothing touches the network."""
import huggingface_hub.constants
import pytest
import torch

from core import engine
from core.config import RunConfig
from core.models import tar

torch.set_num_threads(1)
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PAIR = "tar-512-256"


def put_in_cache(root, repo: str, files: dict[str, bytes]) -> None:
    """A hub cache entry as huggingface_hub writes it: refs/main names a snapshot holding the files."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(COMMIT)
    snap = base / "snapshots" / COMMIT
    snap.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (snap / name).write_bytes(data)


def ids_prompt(space, tiny) -> str:
    """The tiny ids file in the weights folder: on a Space a prompt may name files there only."""
    weights = space.parent / "weights"
    weights.mkdir(exist_ok=True)
    (weights / "ids.txt").write_bytes((tiny / "ids.txt").read_bytes())
    return str(weights / "ids.txt")


def cache_tiny(cache, tiny, keys) -> None:
    """The tiny files of CHECKPOINTS keys into the cache, each under its own hub repository."""
    for k in keys:
        c = tar.CHECKPOINTS[k]
        put_in_cache(cache, c.hub_repo, {c.file: (tiny / c.file).read_bytes()})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    tar.write_tiny(d)
    return d


@pytest.fixture
def space(tmp_path, monkeypatch):
    """A Space with an empty weights folder, a hub cache at tmp/cache, and no network."""
    monkeypatch.setenv("SPACE_ID", "someone/mulo-sd-explorer")
    monkeypatch.setenv(tar.ENV_DIR, str(tmp_path / "weights"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    for var in ("MULO_TAR_TEACHER", "MULO_TAR_LLM"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    (tmp_path / "cache").mkdir()
    return tmp_path / "cache"


def test_on_a_space_every_tar_pair_is_offered_with_what_it_will_download(space):
    found = tar.found_pairs()
    assert set(found) == set(tar.PAIRS)
    assert ("downloads ar_dtok_lp_1024px.pth, ar_dtok_lp_512px.pth, vq_ds16_t2i.pt, ta_tok.pth from the "
            "Hugging Face hub when chosen") in found["tar-1024-512"]
    assert "ar_dtok_lp_256px.pth" in found["tar-512-256"] and "1024" not in found["tar-512-256"].split(";")[1]


def test_off_a_space_only_pairs_with_local_files_are_offered(space, tiny, monkeypatch):
    monkeypatch.delenv("SPACE_ID")
    assert tar.found_pairs() == {}
    cache_tiny(space, tiny, tar.pair_files(PAIR))     # the hub cache alone does not make a pair local
    assert tar.found_pairs() == {}
    weights = space.parent / "weights"
    weights.mkdir()
    for k in tar.pair_files(PAIR):
        (weights / tar.CHECKPOINTS[k].file).write_bytes((tiny / tar.CHECKPOINTS[k].file).read_bytes())
    found = tar.found_pairs()
    assert set(found) == {PAIR} and f"weights in {weights}" in found[PAIR]


def test_a_chosen_pair_is_fetched_through_huggingface_hub_into_its_cache_and_runs(space, tiny):
    cache_tiny(space, tiny, tar.pair_files(PAIR))
    assert tar.to_fetch(PAIR) == []
    assert "weights in the hub cache" in tar.found_pairs()[PAIR]
    tar.fetch_pair(PAIR)
    paths = tar.locate(tar.pair_files(PAIR), hub=True)
    assert all(space in p.parents and "snapshots" in p.parts for p in paths.values())
    assert {k: p.read_bytes() for k, p in paths.items()} == {
        k: (tiny / tar.CHECKPOINTS[k].file).read_bytes() for k in tar.pair_files(PAIR)}
    assert paths[tar.TOKENIZER].parents[2].name == "models--peizesun--llamagen_t2i"

    pair = tar.load_pair(PAIR, hub=True)     # TA-Tok too: the ids prompt is decoded from the cached ta_tok.pth
    assert pair.grid == (8, 8) and pair.scales == (2,)
    trace = engine.run(RunConfig(method="ar", prompt=ids_prompt(space, tiny), sampling=tar.SAMPLING, model=PAIR), pair)
    assert len(trace.tokens) == 8 and all(len(row) == 8 and all(0 <= t < 64 for t in row) for row in trace.tokens)


def test_offline_a_file_missing_from_the_cache_gives_the_clear_message(space, tiny):
    cache_tiny(space, tiny, [k for k in tar.pair_files(PAIR) if k != tar.TATOK])
    assert tar.to_fetch(PAIR) == ["ta_tok.pth"]
    with pytest.raises(tar.MissingWeights, match=r"could not fetch ta_tok\.pth from the Hugging Face hub "
                                                 r"\(csuhan/TA-Tok\).*Offline\?"):
        tar.fetch_pair(PAIR)
    pair = tar.load_pair(PAIR, hub=True)     # the models load; TA-Tok is wanted by the first prompt
    with pytest.raises(tar.MissingWeights, match=r"could not fetch ta_tok\.pth"):
        engine.run(RunConfig(method="ar", prompt=ids_prompt(space, tiny), model=PAIR), pair)


def test_the_teacher_config_and_the_llm_come_as_snapshots_from_the_cache(space):
    from transformers import Siglip2Config
    put_in_cache(space, tar.TEACHER_REPO, {"config.json": Siglip2Config().to_json_string().encode()})
    cfg = tar._teacher_config(None, hub=True)
    assert cfg.model_type == "siglip2"
    with pytest.raises(tar.MissingWeights, match=r"could not fetch csuhan/Tar-1\.5B from the Hugging Face hub.*Offline\?"):
        tar.Conditioning(tar.FEATURES, hub=True).text()
