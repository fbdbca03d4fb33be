"""LlamaGen pairs on a Hugging Face Space: offered without their files, fetched through huggingface_hub
into its cache. The hub cache is prepared here, offline, so huggingface_hub's own download call runs
and resolves from it; nothing touches the network."""
import huggingface_hub.constants
import pytest

from core.models import hub as hf
from core.models import llamagen as lg

COMMIT = "0123456789abcdef0123456789abcdef01234567"
C2I = "llamagen-c2i-B-256"


def put_in_cache(root, repo: str, files: dict[str, bytes]) -> None:
    """A hub cache entry as huggingface_hub writes it: refs/main names a snapshot holding the files."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(COMMIT)
    snap = base / "snapshots" / COMMIT
    snap.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (snap / name).write_bytes(data)


@pytest.fixture
def space(tmp_path, monkeypatch):
    """A Space with an empty weights folder, a hub cache at tmp/cache, and no network."""
    monkeypatch.setenv("SPACE_ID", "someone/mulo-sd-explorer")
    monkeypatch.setenv(lg.ENV_DIR, str(tmp_path / "weights"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MULO_T5_DIR", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    (tmp_path / "cache").mkdir()
    return tmp_path / "cache"


def test_on_a_space_every_pair_is_offered_with_what_it_will_download(space):
    found = lg.found_pairs()
    assert set(found) == set(lg.PAIRS)
    assert "downloads c2i_B_256.pt, vq_ds16_c2i.pt from the Hugging Face hub" in found[C2I]
    assert "google/flan-t5-xl" in found["llamagen-t2i"]


def test_off_a_space_only_pairs_with_local_files_are_offered(space, monkeypatch):
    monkeypatch.delenv("SPACE_ID")
    assert lg.found_pairs() == {}


def test_a_chosen_pair_is_fetched_through_huggingface_hub_into_its_cache(space):
    put_in_cache(space, lg.CHECKPOINTS["c2i_B_256"].hub_repo, {"c2i_B_256.pt": b"gpt", "vq_ds16_c2i.pt": b"vq"})
    assert lg.to_fetch(C2I) == []
    lg.fetch_pair(C2I)
    paths = lg.locate(lg.pair_files(C2I), hub=True)
    assert {p.read_bytes() for p in paths.values()} == {b"gpt", b"vq"}
    assert all(space in p.parents and "snapshots" in p.parts for p in paths.values())
    assert "weights in the hub cache" in lg.found_pairs()[C2I]


def test_offline_a_file_missing_from_the_cache_keeps_the_clear_message(space):
    put_in_cache(space, lg.CHECKPOINTS["c2i_B_256"].hub_repo, {"vq_ds16_c2i.pt": b"vq"})
    assert lg.to_fetch(C2I) == ["c2i_B_256.pt"]
    with pytest.raises(lg.MissingWeights, match=r"could not fetch c2i_B_256\.pt from the Hugging Face hub.*Offline\?"):
        lg.fetch_pair(C2I)


def test_a_space_with_persistent_storage_keeps_downloads_there(monkeypatch, tmp_path):
    monkeypatch.setenv("SPACE_ID", "someone/mulo-sd-explorer")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setattr(hf, "PERSISTENT", tmp_path)
    assert hf.cache_dir() == tmp_path / ".huggingface" / "hub"
    monkeypatch.delenv("SPACE_ID")
    assert hf.cache_dir() is None


def test_download_progress_reaches_the_callback():
    seen = []
    bar = hf._bar(lambda f, done, total: seen.append((f, done, total)), "c2i_B_256.pt")(total=10, disable=True)
    bar.update(4)
    bar.update(6)
    assert seen == [("c2i_B_256.pt", 4, 10), ("c2i_B_256.pt", 10, 10)]


def _knobs(**overrides) -> list:
    from app import inputs
    return [{**inputs.DEFAULTS, **overrides}[k] for k in inputs.KNOBS]


def test_the_app_shows_download_progress_on_a_space(space, monkeypatch):
    import gradio as gr
    from app import generation
    from core import engine

    def slow_fetch(name, weights_dir=None, progress=None):
        import time
        progress("c2i_B_256.pt", 2**20, 2 * 2**20)
        time.sleep(0.8)
    monkeypatch.setattr(lg, "fetch_pair", slow_fetch)
    engine.load_pair.cache_clear()
    shown, run = [], generation.generate(None, False, *_knobs(model=C2I, prompt="207", method="ar"))
    with pytest.raises(gr.Error, match="c2i_B_256.pt"):  # nothing was really fetched: loading then fails
        for out in run:
            shown.append(out[1])
    assert "Downloading c2i_B_256.pt: 1 of 2 MiB…" in shown


def test_offline_the_app_reports_the_cores_message(space):
    import gradio as gr
    from app import generation
    with pytest.raises(gr.Error, match=r"could not fetch c2i_B_256\.pt.*Offline\?"):
        list(generation.generate(None, False, *_knobs(model=C2I, prompt="207", method="ar")))
