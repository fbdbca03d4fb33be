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


def _corrupted_copy(tmp_path, name: str):
    """A copy of the shipped assets with the last byte of `name`'s file flipped; its path."""
    shutil.copytree(ASSETS, tmp_path / "assets")
    path = tmp_path / "assets" / family.FILES[name]
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0xFF
    path.write_bytes(bytes(blob))
    return path


def test_a_corrupted_asset_is_refused(tmp_path):
    _corrupted_copy(tmp_path, "tokenizer")
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


# --- mulo's trained up-samplers (sr, learned) --------------------------------------------------------

UPSAMPLER_ASSETS = [f"{job}_x{r}" for job in ("sr", "learned", "distilled") for r in (2, 4)]
HELDOUT_SCENES = 50   # held-out scenes of the what-training-bought tests (~2 s each on a CPU)


@pytest.mark.parametrize("name", UPSAMPLER_ASSETS)
def test_shipped_up_samplers_load_match_their_checksums_and_record_their_figures(name):
    entry = family.read_manifest()["models"][name]
    assert family.sha256(ASSETS / entry["file"]) == entry["sha256"]
    assert entry["train_steps"] > 0 and "data_seed" in entry and entry["train_config"]["scale"] == int(name[-1])
    job, r = name.split("_x")
    net = family.load_upsampler(job, int(r))
    assert net.cfg.scale == int(r) and entry["evaluation"]["heldout_images"] > 0


def test_the_up_samplers_ship_within_three_mib():
    """Six networks (sr, learned, distilled at r = 2 and 4) in fp16: 2.7 MiB when measured."""
    sizes = {n: (ASSETS / family.FILES[n]).stat().st_size for n in UPSAMPLER_ASSETS}
    assert sum(v for n, v in sizes.items() if n.startswith("sr")) <= 2 * 2 ** 20, sizes
    assert sum(sizes.values()) <= 3 * 2 ** 20, sizes


def _figures(net, job, r):
    from core.embedded import evaluate
    return evaluate.upsampler_figures(net, job, r, HELDOUT_SCENES, lambda *a: None)


@pytest.mark.parametrize("r", [2, 4])
def test_the_sr_network_beats_bicubic_on_held_out_scenes_and_an_untrained_one_does_not(r):
    from core.models.upsamplers import SRConfig, SRNet
    trained = _figures(family.load_upsampler("sr", r), "sr", r)
    untrained = _figures(SRNet(SRConfig(scale=r)).eval(), "sr", r)   # its residual is zero: bicubic
    for figs, beats in ((trained, True), (untrained, False)):
        assert (figs["sr"]["psnr"] > figs["pixel"]["psnr"] + 0.3) is beats, figs
        assert (figs["sr"]["sharpness"] > 1.5 * figs["pixel"]["sharpness"]) is beats, figs
        assert (figs["sr"]["token_accuracy"] > figs["pixel"]["token_accuracy"] + 0.02) is beats, figs


@pytest.mark.parametrize("r", [2, 4])
def test_the_learned_up_sampler_beats_nearest_on_held_out_pairs_and_an_untrained_one_does_not(r):
    from core.models.upsamplers import TokenUpsampler, TokenUpsamplerConfig
    torch.manual_seed(0)
    trained = _figures(family.load_upsampler("learned", r), "learned", r)
    untrained = _figures(TokenUpsampler(TokenUpsamplerConfig(scale=r)).eval(), "learned", r)
    for figs, beats in ((trained, True), (untrained, False)):
        assert (figs["learned"]["token_accuracy"] > figs["nearest"]["token_accuracy"] + 0.01) is beats, figs


def test_a_missing_or_corrupt_up_sampler_is_refused_by_name(tmp_path):
    path = _corrupted_copy(tmp_path, "sr_x2")
    with pytest.raises(family.AssetError, match=r"sr_x2\.safetensors does not match the checksum"):
        family.load_upsampler("sr", 2, tmp_path / "assets")
    path.unlink()
    with pytest.raises(family.AssetError, match=r"the sr_x2 weights are missing: .* train them with `python -m core "
                                                r"train --job sr --scale 2 --steps N --export`"):
        family.load_upsampler("sr", 2, tmp_path / "assets")


def test_the_up_sampler_jobs_train_and_resume(tmp_path):
    """A few steps of each job lower its loss on the batch it saw, and the CLI names the scale knob."""
    # sr starts as bicubic (a good start: its loss falls slowly); learned starts at about ln V
    for job, lr, steps, drop in (("sr", 3e-4, 25, 0.97), ("learned", 5e-3, 12, 0.9)):
        cfg = train.TrainConfig(job=job, steps=steps, batch=2, lr=lr, warmup=1, scale=2, detail=1.0 if job == "sr" else 0)
        j = train.make_job(cfg, ASSETS)
        opt = torch.optim.AdamW(j.model.parameters(), lr=cfg.lr)
        with torch.no_grad():
            before = j.loss(0).item()
        for _ in range(cfg.steps):
            loss = j.loss(0)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            assert j.loss(0).item() < before * drop, job   # measured: sr 0.0898 -> 0.0864
    with pytest.raises(ValueError, match="the sr job needs --scale 2 or 4"):
        train.make_job(train.TrainConfig(job="sr", steps=1, batch=1, lr=1e-3), ASSETS)
