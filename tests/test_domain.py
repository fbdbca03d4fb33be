import numpy as np
import pytest

from core.embedded import domain
from core.embedded.domain import PromptError, parse_prompt, render, sample_scene


def test_the_same_seed_gives_the_same_scene_and_pixels():
    a, b = sample_scene(123), sample_scene(123)
    assert a == b
    assert np.array_equal(render(a, 64), render(b, 64))


def test_different_seeds_give_different_scenes():
    images = {render(sample_scene(s), 32).tobytes() for s in range(20)}
    assert len(images) == 20


def test_the_domain_covers_its_vocabulary():
    scenes = [sample_scene(s) for s in range(600)]
    objs = [o for s in scenes for o in s.objects]
    assert {o.shape for o in objs} == set(domain.SHAPES) and len(domain.SHAPES) >= 5
    assert {o.colour for o in objs} == set(domain.COLOURS) and len(domain.COLOURS) >= 8
    assert {o.size for o in objs} == set(domain.SIZES)
    assert {(o.row, o.col) for o in objs} == {(r, c) for r in range(3) for c in range(3)}
    assert {len(s.objects) for s in scenes} == {1, 2, 3}
    assert {s.background for s in scenes} == set(domain.BACKGROUNDS)


def test_backgrounds_are_not_flat():
    for kind in domain.BACKGROUNDS:
        s = next(sample_scene(i) for i in range(500) if sample_scene(i).background == kind)
        corner = render(s, 64)[:12, :12].astype(float)
        assert corner.std() > 2.0, kind


def test_captions_parse_back_to_their_scene():
    for seed in range(200):
        s = sample_scene(seed)
        p = parse_prompt(s.caption())
        assert p.objects == s.objects and p.background == s.background and p.bg_colour == s.bg_colour


def test_a_caption_reads_as_english():
    s = parse_prompt("a small red circle top left and a blue square center on a striped green background")
    assert s.caption() == "a small red circle top left and a medium blue square center on a striped green background"


def test_an_unknown_word_names_it_and_lists_the_vocabulary():
    with pytest.raises(PromptError) as e:
        parse_prompt("a red dragon center on a striped blue background")
    assert "'dragon'" in str(e.value) and "circle" in str(e.value) and "striped" in str(e.value)


@pytest.mark.parametrize("prompt, fragment", [
    ("", "empty"),
    ("a red circle center", "background clause"),
    ("a red circle on a wavy blue background", "wavy"),
    ("a red circle center and a blue square center on a striped blue background", "share one position"),
    ("a circle red center on a striped blue background", "object reads"),
])
def test_malformed_prompts_say_what_is_wrong(prompt, fragment):
    with pytest.raises(PromptError, match=fragment):
        parse_prompt(prompt)
