"""The tree peers as released (HyattDD/VVS, jadohu/LANTERN): each rule against a hand-computed case of
the released definition, with the old rule as the control; VVS's two schedules and its skipped cycles
against a replay of their definitions written here from the released functions' text, with a control
rule that the replay refuses; the released tree sizes."""
import math
from collections import Counter

import pytest
import torch

from core import engine, trees
from core.config import TREE_SIZES, ParameterError, RunConfig, SamplingConfig, validate
from core.methods import lantern, lantern_pp, registry, vvs
from test_trees import PROMPT, _pair

NB = torch.tensor([[1, 2, 3], [0, 2, 3], [3, 1, 0], [2, 1, 0]])   # nearest first, itself excluded
P = torch.tensor([0.1, 0.15, 0.05, 0.7])


# --- LANTERN's residual after a relaxed rejection ------------------------------------------------------

def test_lantern_official_residual_zeroes_x_and_its_first_k_plus_1_neighbours():
    """k = 1, delta = 0.2: neighbour 1 (0.15) is moved onto x = 0. Released: x and its first k + 1 = 2
    neighbours (1 and 2) leave p, although only 1 was moved; the papers' text (moved): x and 1 only."""
    a, rest, _ = lantern.relaxed_point_rule(NB, 1, 0.2, "official")(P, 0, None)
    assert a == pytest.approx(0.25)
    torch.testing.assert_close(rest, torch.tensor([0.0, 0.0, 0.0, 1.0]))
    _, moved, _ = lantern.relaxed_point_rule(NB, 1, 0.2, "moved")(P, 0, None)
    torch.testing.assert_close(moved, torch.tensor([0.0, 0.0, 0.05, 0.7]) / 0.75)
    assert not torch.allclose(moved, rest)                  # the control: the old rule fails the released case


def test_lantern_official_residual_keeps_the_neighbours_when_nothing_moved_and_is_uniform_when_all_leave():
    p = torch.tensor([0.1, 0.3, 0.05, 0.55])                # the nearest neighbour alone (0.3) passes delta
    a, rest, _ = lantern.relaxed_point_rule(NB, 3, 0.2, "official")(p, 0, None)
    assert a == pytest.approx(0.1)
    torch.testing.assert_close(rest, torch.tensor([0.0, 0.3, 0.05, 0.55]) / 0.9)
    # k at the codebook's size: every code leaves p and the code's all-ones fallback draws uniformly
    _, rest, _ = lantern.relaxed_point_rule(NB, 3, 0.2, "official")(P, 0, None)
    torch.testing.assert_close(rest, torch.full((4,), 0.25))


def test_lantern_pp_official_residual_subtracts_q_cut_at_the_neighbours_from_the_unrelaxed_p():
    """lambda 2.6: budget 0.16, neighbour 1 (0.15) moves. Released: normalize(max(0, p - q')), p unrelaxed,
    q' = q with x's first k + 1 = 2 neighbours (1, 2) zeroed and not renormalised."""
    q = torch.tensor([0.4, 0.2, 0.2, 0.2])
    a, rest, q_rest = lantern_pp.bounded_sampled_rule(NB, 1, 2.6, "official")(P, 0, q)
    assert a == pytest.approx(0.25 / 0.4)
    want = torch.tensor([0.0, 0.15, 0.05, 0.5])             # max(0, p - (0.4, 0, 0, 0.2))
    torch.testing.assert_close(rest, want / want.sum())
    torch.testing.assert_close(q_rest, torch.tensor([0.0, 1 / 3, 1 / 3, 1 / 3]))
    _, moved, _ = lantern_pp.bounded_sampled_rule(NB, 1, 2.6, "moved")(P, 0, q)
    p_relaxed = torch.tensor([0.25, 0.0, 0.05, 0.7])
    torch.testing.assert_close(moved, (p_relaxed - q).clamp_min(0) / (p_relaxed - q).clamp_min(0).sum())
    assert not torch.allclose(moved, rest)


@pytest.mark.parametrize("knob, value", [("lantern_residual", "code"), ("static_tree", "big"),
                                         ("vvs_interval", 1), ("vvs_interval", 65), ("vvs_threshold", 1.5)])
def test_every_new_knob_is_refused_by_name_outside_its_range(knob, value):
    with pytest.raises(ParameterError, match=f"^{knob} must be"):
        validate(RunConfig(method="vvs", sampling=SamplingConfig()).with_params(**{knob: value}), 512, (32, 32),
                 registry())


def test_vvs_interval_zero_is_accepted_and_never_skips(tiny_tree_pair):
    none = engine.run(RunConfig(method="vvs", prompt=PROMPT, seed=3).with_params(vvs_interval=0), tiny_tree_pair)
    plain = engine.run(RunConfig(method="lantern", prompt=PROMPT, seed=3), tiny_tree_pair)
    assert none.tokens == plain.tokens and not _skipped(none)


# --- the released tree sizes ------------------------------------------------------------------------

def test_the_paper_static_tree_is_the_released_57_node_tree():
    t = trees.PAPER_STATIC_TREE
    assert len(t) == len(set(t)) == 57 and max(map(len, t)) == 5
    assert sorted(Counter(map(len, t)).items()) == [(1, 5), (2, 13), (3, 16), (4, 14), (5, 9)]
    assert all(p[:-1] in t or len(p) == 1 for p in t)                         # closed under parents
    assert all(p[-1] == 0 or (*p[:-1], p[-1] - 1) in t for p in t)           # ranks without gaps
    assert sum(1 for p in t if not any(c[:-1] == p for c in t)) == 33        # leaves
    assert TREE_SIZES["paper"] == dict(tree_tokens=59, tree_depth=5, tree_top_k=10, static_tree="paper",
                                                         lantern_k=1000)


# --- VVS: the schedules and the skipped cycle, replayed from their definitions ---------------------------

@pytest.fixture(scope="module")
def tiny_tree_pair(tokenizer):
    return _pair(tokenizer, (16, 16))


def _skipped(trace):
    return [s for s in trace.steps if s["phase"] == "decode" and s.get("verified") is False]


def _cycles(trace):
    """(cycle index, root cell, the cycle's tree record, skipped) for every cycle, in order."""
    W = trace.grid["target"][1]
    out, steps = [], trace.steps[1:]
    for n in range(0, len(steps), 2):
        draft, second = steps[n], steps[n + 1]
        assert draft["phase"] == "draft"
        skipped = second["phase"] == "decode"
        first = second["cells"][0]
        root = first[0] * W + first[1] - 1
        out.append((n // 2, root, second["tree"], skipped))
    return out


def _agreement(tree: dict, codes: torch.Tensor, every: int = 2) -> float:
    """The dynamic schedule's score, written from the released function's text: every other leaf path
    (root excluded), the per-depth cosine of their codes weighted by 0.9^l normalised over the longest
    path, summed where both paths reach l, averaged over pairs."""
    parent, token = tree["parent"], tree["token"]
    leaves = [n for n in range(len(token)) if n not in parent]
    paths = []
    for n in leaves:
        path = []
        while n != -1:
            path.insert(0, token[n])
            n = parent[n]
        paths.append(path)
    paths = paths[::every]
    if len(paths) < 2:
        return 0.0
    longest = max(map(len, paths))
    weights = [0.9 ** l / sum(0.9 ** m for m in range(longest)) for l in range(longest)]
    scores = []
    for i in range(len(paths)):
        for j in range(i + 1, len(paths)):
            scores.append(sum(weights[l] * float(codes[paths[i][l]] @ codes[paths[j][l]])
                              for l in range(min(len(paths[i]), len(paths[j])))))
    return sum(scores) / len(scores)


def test_vvs_uniform_skips_exactly_the_cycles_its_definition_names(tiny_tree_pair):
    trace = engine.run(RunConfig(method="vvs", prompt=PROMPT, seed=5).with_params(vvs_interval=3), tiny_tree_pair)
    cycles = _cycles(trace)
    released = lambda i, root: root >= 6 and i % 3 == 1          # noqa: E731
    assert [s for *_, s in cycles] == [released(i, root) for i, root, _, _ in cycles]
    assert sum(s for *_, s in cycles) >= 5
    # the control: skipping after every verified cycle (the old reading) is not what ran
    old = lambda i, root, prev: not prev                         # noqa: E731
    assert [s for *_, s in cycles] != [old(i, r, cycles[i - 1][3] if i else True) for i, r, _, _ in cycles]


def test_vvs_dynamic_skips_where_the_paths_agree_and_never_twice_in_a_row(tiny_tree_pair):
    codes = vvs.code_vectors(tiny_tree_pair.tokenizer)
    run = lambda th: engine.run(RunConfig(method="vvs", prompt=PROMPT, seed=5).with_params(  # noqa: E731
        vvs_schedule="dynamic", vvs_threshold=th), tiny_tree_pair)
    scores = sorted(_agreement(t, codes) for _, root, t, _ in _cycles(run(1.0)) if root >= 6)
    threshold = round(scores[len(scores) // 2], 4)                  # the median: both decisions happen
    cycles = _cycles(run(threshold))
    ran = [s for *_, s in cycles]
    replay = [root >= 6 and not (i and cycles[i - 1][3]) and _agreement(t, codes) >= threshold
              for i, root, t, _ in cycles]
    assert ran == replay and 3 <= sum(ran) < len(ran) - 3
    assert not any(a and b for a, b in zip(ran, ran[1:]))
    # the control: the same schedule over every leaf path (not every other one) is not what ran
    control = [root >= 6 and not (i and cycles[i - 1][3]) and _agreement(t, codes, every=1) >= threshold
               for i, root, t, _ in cycles]
    assert control != ran


def test_a_skipped_cycle_commits_its_leaf_path_cut_to_the_mean_path_length(tiny_tree_pair):
    trace = engine.run(RunConfig(method="vvs", prompt=PROMPT, seed=9).with_params(vvs_interval=2), tiny_tree_pair)
    W = trace.grid["target"][1]
    skipped = _skipped(trace)
    assert len(skipped) >= 5
    for s in skipped:
        t = s["tree"]
        leaves = [n for n in range(len(t["token"])) if n not in t["parent"]]
        mean_len = math.floor(sum(1 + t["depth"][n] for n in leaves) / len(leaves))
        assert s["mean_len"] == mean_len and s["leaf"] in leaves and s["nfe"] == 0
        path, n = [], s["leaf"]
        while n != -1:
            path.insert(0, t["token"][n])
            n = t["parent"][n]
        A = min(len(path), mean_len - 1)
        cells = [i * W + j for i, j in s["cells"]]
        assert s["tokens"] == path[:len(cells)] and (len(cells) == A or cells[-1] == W * trace.grid["target"][0] - 1)
        assert cells == list(range(cells[0], cells[0] + len(cells)))
        assert [trace.tokens[c // W][c % W] for c in cells] == s["tokens"]      # committed as drawn
    leaves_drawn = {s["leaf"] for s in skipped}
    assert len(leaves_drawn) > 1                                                 # a random leaf, not the first


# --- temperature 0 as the released code -----------------------------------------------------------------

def test_the_greedy_test_raises_p_x_alone_and_asks_for_the_argmax():
    p = torch.tensor([0.4, 0.3, 0.1, 0.2])
    assert not trees.greedy_relaxed_test(NB, 3, delta=0.2)(p, 3)      # 0.2 + 0.1 = 0.3 < 0.4
    assert trees.greedy_relaxed_test(NB, 3, delta=0.5)(p, 3)          # 0.2 + 0.1 + 0.3 = 0.6 > 0.4
    assert not trees.greedy_relaxed_test(NB, 3, lam=1.5)(p, 3)        # budget 0.1: 0.3 < 0.4
    assert trees.greedy_relaxed_test(NB, 3, lam=3.0)(p, 3)            # budget 0.4: 0.6
    assert trees.greedy_relaxed_test(NB, 3, delta=0.0)(p, 0) and not trees.greedy_relaxed_test(NB, 3, delta=0.0)(p, 1)


@pytest.mark.parametrize("method, knobs", [("lantern", dict(delta=0.3)), ("lantern_pp", dict(lantern_lambda=4.0))])
def test_greedy_lantern_commits_what_the_released_test_passes_on_cache_free_rows(tiny_tree_pair, method, knobs):
    """At T = 0 every committed draft passes the released test on the plain softmax of a cache-free
    forward, the node that stopped the path fails it, and the token after the path is the target's
    argmax. The control: some committed drafts are not the plain argmax, which exact matching (the rule
    on the one-hot distribution, what ran before) never commits."""
    from test_speculative import cache_free_row
    pair = tiny_tree_pair
    greedy = SamplingConfig(temperature=0.0)
    plain = trees.plain_sampling(greedy)
    t = engine.run(RunConfig(method=method, prompt=PROMPT, seed=2, sampling=greedy).with_params(**knobs), pair)
    final = [x for row in t.tokens for x in row]
    K = pair.neighbours.shape[1]
    delta, lam = knobs.get("delta"), knobs.get("lantern_lambda")
    passes = lambda p, x: trees.greedy_relaxed_test(pair.neighbours, K, delta=delta, lam=lam)(p, x)  # noqa: E731
    W = pair.grid[1]
    relaxed = checked = 0
    for s in [s for s in t.steps if s["phase"] == "verify"][:40]:
        cells = [i * W + j for i, j in s["cells"]]
        n_ok = sum(s["accepted"])
        for c in cells[:n_ok]:
            p = cache_free_row(pair, pair.target, final[:c], plain)
            assert passes(p, final[c])
            relaxed += int(p.argmax()) != final[c]
            checked += 1
        if len(cells) > n_ok:
            after = cells[n_ok]
            assert final[after] == int(cache_free_row(pair, pair.target, final[:after], greedy).argmax())
            if n_ok < len(s["accepted"]):          # a stopping node: it fails the test at its cell
                stop = s["tree"]["token"][s["tree"]["verdict"].index(0)]
                assert not passes(cache_free_row(pair, pair.target, final[:after], plain), stop)
    assert checked >= 20 and relaxed >= 2


# --- the head's caption context ---------------------------------------------------------------------------

def _lantern_head(tmp_path, target):
    """The head of `target` written as a LANTERN drafter folder and loaded back (caption slots on)."""
    import json

    from core.models.eagle import DraftHead, load_lantern
    torch.manual_seed(3)
    ref = DraftHead.for_target(target).eval()
    with torch.no_grad():                                  # values large enough to move the head's q
        ref.layers[0].self_attn.v_proj.weight.mul_(20)
    torch.save(ref.state_dict(), tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(dict(num_attention_heads=target.cfg.n_head,
                                                          rms_norm_eps=target.cfg.norm_eps)))
    return load_lantern(tmp_path)


def test_a_lantern_head_reads_the_caption_slots_and_its_first_q_equals_a_cache_free_forward(tmp_path, tokenizer):
    """Its first q (the root's children) equals one uncached causal pass of the head over LANTERN's input:
    token 0 with the target's feature at every caption slot but the last, under a RoPE of zeros, then
    cell 0. The control: the same weights without caption slots draft another q."""
    import dataclasses

    from conftest import tiny_gpt
    from core.decoding import Decoder
    from core.embedded import data
    from core.models.eagle import DraftHead
    target = tiny_gpt(0)
    head = _lantern_head(tmp_path, target)
    assert head.cfg.caption_slots
    grid, s = (16, 16), SamplingConfig()
    ids, mask = data.caption_ids(PROMPT, 32)
    dec = Decoder(target, grid, torch.as_tensor(ids), torch.as_tensor(mask), s, "cpu")
    dec.prefill(features=True)
    P = target.cfg.prefix_len

    def first_q(h):
        hd = trees.HeadDecoder(h, dec)
        hd.features[0] = dec.p0_feature
        final = torch.zeros(grid[0] * grid[1], dtype=torch.long).numpy()
        final[0] = 7
        return hd.distribution(hd.catch_up(0, final)[:, None], [0])[0], hd

    q, hd = first_q(head)
    B = dec.p0_feature.shape[0]
    tokens = torch.tensor([0] * (P - 1) + [7])[None].expand(B, -1)
    feats = torch.cat([dec.prefix_features[:, :-1], dec.p0_feature[:, None]], dim=1)
    rope = torch.cat([torch.zeros(P - 1, *hd._rope([0]).shape[1:]), hd._rope([0])])
    cell = hd._cond([0], B, feats.shape[-1], feats.dtype)         # what the target adds at cell 0's slot, if any
    cond = None if cell is None else torch.cat([torch.zeros(B, P - 1, feats.shape[-1]), cell], dim=1)
    with torch.no_grad():
        out = head.forward(tokens, feats, rope, cond)[:, -1]
    reference = hd.distribution(out[:, None], [0])[0]
    torch.testing.assert_close(q, reference, atol=1e-6, rtol=1e-4)
    plain = DraftHead(dataclasses.replace(head.cfg, caption_slots=False))
    plain.load_state_dict(head.state_dict())
    assert float((first_q(plain.eval())[0] - reference).abs().max()) > 100 * float((q - reference).abs().max())


def test_a_tree_run_with_a_captioned_head_gives_a_valid_trace(tmp_path, tokenizer):
    from conftest import tiny_gpt
    from core.embedded import data
    from core.models.pair import ModelPair
    from core.trace import Trace
    target = tiny_gpt(0)
    head = _lantern_head(tmp_path, target)
    pair = ModelPair("tiny", target, target, None, tokenizer, (16, 16), lambda prompt, g: data.caption_ids(prompt, 32),
                     tokenizer.neighbours(tokenizer.vocab_size - 1), head_net=lambda: head)
    t = engine.run(RunConfig(method="lantern", prompt=PROMPT, seed=1), pair)
    assert Trace.from_json(t.to_json()).tokens == t.tokens
