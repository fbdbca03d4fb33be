"""A Tar pair in the app, as a user meets it: with its files in the folder named by MULO_TAR_DIR
(tiny random stand-ins in the official layouts, tar.write_tiny) the Model pair menu offers the Tar
pairs, picking one sets the official sampling (CFG 4, no top-k) and says what a Tar prompt is, a
mulo and an ar run on a file of TA-Tok ids come back as images and a trace, and a prompt whose file
is absent (the Tar LLM for text, a missing ids file) comes back as a message naming it. Driven over
HTTP with gradio_client against a launched app, as test_app_e2e."""
import json

import numpy as np
import pytest
from gradio_client import Client
from PIL import Image

from app import inputs, panels, render
from appserver import call, running_app
from core import engine
from core.models import tar

PAIR = "tar-1024-512"


@pytest.fixture(scope="module")
def tar_app(tmp_path_factory):
    """(url, client, ids file) of an app launched with the tiny Tar files in MULO_TAR_DIR."""
    folder = tmp_path_factory.mktemp("tar-weights")
    ids = tar.write_tiny(folder)
    env = pytest.MonkeyPatch()
    env.setenv(tar.ENV_DIR, str(folder))
    for name in ("MULO_TAR_LLM", "SPACE_ID"):   # no LLM folder elsewhere, no hub: the files here only
        env.delenv(name, raising=False)
    engine.load_pair.cache_clear()              # no pair of another folder under the same name
    try:
        with running_app() as url:
            yield url, Client(url, verbose=False), ids
    finally:
        env.undo()
        engine.load_pair.cache_clear()


def _update(value: dict, key: str):
    assert value.get("__type__") == "update", value
    return value[key]


@pytest.fixture(scope="module")
def picked(tar_app) -> dict:
    """What the page shows once the user picks the Tar pair in the menu: the knobs the pick sets
    (inputs.pick_model), the pair's description and the prompt box's label (inputs.prompt_box)."""
    url, _, _ = tar_app
    msg = call(url, "pick_model", [PAIR])
    assert msg["success"], msg
    top_k, cfg, temperature, interval, lantern_k, scale, info = msg["output"]["data"]
    box = call(url, "prompt_box", [PAIR])
    assert box["success"], box
    return dict(top_k=_update(top_k, "value"), cfg=_update(cfg, "value"), temperature=_update(temperature, "value"),
                cfg_interval=_update(interval, "value"), scale=_update(scale, "value"),
                scales=[c[1] for c in _update(scale, "choices")], info=info, label=_update(box["output"]["data"][0], "label"))


def knobs(**overrides) -> list:
    return [{**inputs.DEFAULTS, **overrides}[k] for k in inputs.KNOBS]


def tar_knobs(picked: dict, **overrides) -> list:
    """The page's knobs after picking the Tar pair: its sampling and scale as the pick set them."""
    chosen = {k: picked[k] for k in ("top_k", "cfg", "temperature", "cfg_interval", "scale")}
    return knobs(model=PAIR, **{**chosen, **overrides})


def test_the_model_menu_offers_the_tar_pairs_found_in_the_folder(tar_app):
    import httpx
    url, _, _ = tar_app
    config = httpx.get(url + "config", timeout=30).json()
    menu = next(c["props"] for c in config["components"] if c.get("props", {}).get("elem_id") == "model")
    offered = [choice[1] if isinstance(choice, (list, tuple)) else choice for choice in menu["choices"]]
    assert offered[0] == "embedded" and {"tar-1024-512", "tar-1024-256", "tar-512-256"} <= set(offered)


def test_picking_a_tar_pair_sets_its_sampling_and_says_what_its_prompt_is(picked):
    # the official pipeline's sampling: CFG 4.0 on every token, temperature 1, no top-k
    assert (picked["cfg"], picked["top_k"], picked["temperature"], picked["cfg_interval"]) == (4.0, 0, 1.0, -1)
    assert picked["scales"] == [2] and picked["scale"] == 2                   # the 512 px drafter: r = 2
    facts = engine.pair_facts(PAIR)
    assert facts["prompt"] in picked["label"] and PAIR in picked["label"]      # the prompt box says it
    assert "TA-Tok ids" in picked["label"] and "Tar LLM" in picked["label"]
    assert f"**{PAIR}**" in picked["info"] and facts["prompt"] in picked["info"] and tar.ENV_DIR in picked["info"]


def test_the_prompt_box_says_the_embedded_words_again_when_the_embedded_pair_is_picked(tar_app):
    box = call(tar_app[0], "prompt_box", ["embedded"])
    assert _update(box["output"]["data"][0], "label") == inputs.PROMPT_LABEL


def _views(out) -> tuple[str, str, dict]:
    status, trace_path, *views = out
    return status, trace_path, dict(zip(panels.VIEWS, views[-len(panels.VIEWS):]))


def test_a_mulo_run_on_a_file_of_ta_tok_ids_returns_images_and_a_trace(tar_app, picked):
    _, client, ids = tar_app
    status, trace_path, v = _views(client.predict(False, *tar_knobs(picked, method="mulo", k=16, prompt=str(ids)),
                                                  api_name="/generate"))
    assert status.startswith("Done: **mulo**"), status
    assert all(v[k] and v[k].endswith(".png") for k in ("draft", "proposal", "final", "baseline", "canvas"))
    with open(trace_path) as f:
        trace = json.load(f)
    # the final image shown is the pair's VQ decode of the trace's tokens (the oracle: decoded here)
    want = render.grid_image(trace["tokens"], engine.load_pair(PAIR).tokenizer)
    assert np.array_equal(np.asarray(Image.open(v["final"]).convert("RGB")), want)
    assert trace["schema"] == "mulo-trace/3" and trace["model"] == PAIR and trace["method"] == "mulo"
    assert trace["prompt"] == str(ids)
    assert (trace["params"]["cfg"], trace["params"]["top_k"], trace["params"]["k"]) == (4.0, 0, 16)
    assert trace["grid"]["target"] == [16, 16] and trace["grid"]["draft"] == [8, 8]
    assert np.asarray(trace["tokens"]).shape == (16, 16) and 0 <= np.min(trace["tokens"])
    assert np.max(trace["tokens"]) < tar.TINY["vocab_size"]
    assert "sequential passes" in v["stats"]


def test_an_ar_run_on_the_same_pair_and_prompt(tar_app, picked):
    _, client, ids = tar_app
    status, trace_path, v = _views(client.predict(False, *tar_knobs(picked, method="ar", prompt=str(ids)),
                                                  api_name="/generate"))
    assert status.startswith("Done: **ar**"), status
    assert v["final"].endswith(".png")
    with open(trace_path) as f:
        trace = json.load(f)
    assert (trace["model"], trace["method"], trace["params"]["cfg"], trace["params"]["top_k"]) == (PAIR, "ar", 4.0, 0)
    assert trace["grid"]["target"] == [16, 16] and trace["grid"]["draft"] is None


def _refusal(url: str, data: list) -> str:
    msg = call(url, "generate", data)
    assert not msg["success"], msg
    error = msg["output"].get("error") or ""
    assert error and "Traceback" not in error, msg        # a named message, not a stack
    return error


def test_a_text_prompt_names_the_absent_tar_llm_and_the_app_stays_up(tar_app, picked):
    url, client, ids = tar_app
    error = _refusal(url, [False, *tar_knobs(picked, method="mulo", k=16, prompt="a red fox in the snow")])
    assert tar.LLM_REPO in error and "Tar-1.5B" in error and "TA-Tok ids" in error
    # a prompt naming an ids file that is not there is named too
    missing = str(ids.parent / "absent-ids.txt")
    error = _refusal(url, [False, *tar_knobs(picked, method="ar", prompt=missing)])
    assert "absent-ids.txt" in error and "does not exist" in error
    # an ids file of the wrong length says how many ids the pair reads
    short = ids.parent / "short-ids.txt"
    short.write_text("1 2 3\n")
    error = _refusal(url, [False, *tar_knobs(picked, method="ar", prompt=str(short))])
    assert f"reads {tar.TINY['prefix']} TA-Tok ids" in error and "gives 3" in error
    # and the app still runs
    status, *_ = client.predict(False, *tar_knobs(picked, method="ar", prompt=str(ids)), api_name="/generate")
    assert status.startswith("Done: **ar**")


def test_mulo_k_beyond_the_tiny_codebook_is_named_with_its_range(tar_app, picked):
    """The k slider reaches 128; the tiny codebook has 64 codes, so k pools at most 63 neighbours."""
    error = _refusal(tar_app[0], [False, *tar_knobs(picked, method="mulo", k=100, prompt=str(tar_app[2]))])
    assert f"k must be in [0, {tar.TINY['vocab_size'] - 1}]; got 100" in error


def test_a_tar_pair_whose_files_are_absent_is_named_with_its_files_and_folder(tmp_path, monkeypatch):
    """Sent by a client although the menu does not offer it (nothing in the folder): the message names
    the files the pair needs and the variable naming their folder, and nothing is loaded."""
    import gradio as gr
    from app import generation
    monkeypatch.setenv(tar.ENV_DIR, str(tmp_path))
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert PAIR not in engine.found_pairs()
    with pytest.raises(gr.Error) as refused:
        list(generation.generate(None, False, *knobs(model=PAIR, method="ar", prompt="ids.txt")))
    message = str(refused.value)
    assert "ar_dtok_lp_1024px.pth" in message and "ta_tok.pth" in message and tar.ENV_DIR in message
