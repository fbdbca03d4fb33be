import dataclasses
import json
import shutil

import pytest
import torch

from core.embedded import data, family, train
from core.models.gpt import GPT

ASSETS = family.ASSETS


def test_a_few_training_steps_lower_the_loss(tmp_path):
    cfg = train.TrainConfig(job="target", steps=20, batch=2, lr=1e-2, warmup=1, grids=(8,))
    job = train.ARJob(cfg, ASSETS, dataclasses.replace(train.TARGET, dim=64, n_layer=2, n_head=2))
    job.model = GPT(job.model.cfg)
    opt = torch.optim.AdamW(job.model.parameters(), lr=cfg.lr)
    torch.manual_seed(0)
    with torch.no_grad():
        before = job.loss(0).item()                              # about ln V = 6.24 at initialisation
    for step in range(1, cfg.steps):
        loss = job.loss(step % 2)                                # two batches, seen again and again
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = job.loss(0).item()                               # the same batch as before
    assert after < before - 0.5                                  # measured: 6.25 -> 5.47


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path):
    cfg = train.TrainConfig(job="tokenizer", steps=6, batch=2, lr=1e-3, ckpt_every=3, warmup=1)
    whole = train.train(cfg, tmp_path / "whole", ASSETS)

    class Stop(Exception):
        pass

    def crash_at_5(done, total, loss):
        if done == 5:
            raise Stop
    with pytest.raises(Stop):
        train.train(cfg, tmp_path / "split", ASSETS, crash_at_5)   # checkpoint at step 3 survives
    resumed = train.train(cfg, tmp_path / "split", ASSETS)
    for (k, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), k
    steps = [json.loads(line)["step"] for line in (tmp_path / "split" / "log.jsonl").read_text().splitlines()]
    assert steps[-3:] == [4, 5, 6]


@pytest.mark.parametrize("name", ["tokenizer", "target", "drafter", "classifier"])
def test_shipped_assets_load_and_match_their_checksums(name):
    entry = family.read_manifest()["models"][name]
    assert family.sha256(ASSETS / entry["file"]) == entry["sha256"]
    assert entry["train_steps"] > 0 and "data_seed" in entry and "config" in entry
    loader = {"tokenizer": family.load_tokenizer, "classifier": family.load_classifier}.get(
        name, lambda: family.load_gpt(name))
    assert sum(p.numel() for p in loader().parameters()) > 0


def test_a_corrupted_asset_is_refused(tmp_path):
    shutil.copytree(ASSETS, tmp_path / "assets")
    path = tmp_path / "assets" / family.FILES["tokenizer"]
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(family.AssetError, match="checksum"):
        family.load_tokenizer(tmp_path / "assets")


def test_shipped_assets_stay_small():
    total = sum((ASSETS / f).stat().st_size for f in family.FILES.values())
    assert total <= 40 * 1024 * 1024


def test_the_caption_prefix_fits_every_domain_caption():
    longest = "a large purple triangle bottom right, a large purple triangle top left and " \
              "a large purple triangle middle right on a checkered purple background"
    ids, _ = data.caption_ids(longest, 32)                    # raises when a caption does not fit
    words = ids[:data.CAPTION_LEN]
    assert words[-1] == data.GRID_ID[32] and (words != 0).sum() == 25


def test_the_layout_columns_put_each_object_at_its_place():
    ids, _ = data.caption_ids("a small red circle top left and a large blue cross bottom right "
                              "on a striped green background", 16)
    layout = ids[data.CAPTION_LEN:].view(data.LAYOUT_PLACES, 3).tolist()
    empty = list(data.LAYOUT_FACTORS)
    assert layout[0] == [0, 0, 0]                             # circle, red, small
    assert layout[8] == [4, 5, 2]                             # cross, blue, large
    assert all(layout[p] == empty for p in range(1, 8))
