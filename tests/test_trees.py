"""The tree methods (eagle, lantern, lantern_pp, vvs) against oracles: the tree mask against cache-free
forwards of each root-to-node path, greedy eagle against greedy ar, the sampled output against the
exact joint of a short row (with a control that breaks the sibling residual), the relaxed rules
against their definitions, the passes against wrapped forwards."""
import numpy as np
import pytest
import torch

from conftest import PassCounter, tiny_gpt
from core import engine, trees
from core.acceptance import relaxed_target
from core.config import RunConfig, SamplingConfig
from core.decoding import Decoder
from core.embedded import data
from core.methods import lantern, lantern_pp
from core.models.eagle import KEYS, DraftHead, HeadConfig
from core.models.pair import ModelPair
from core.sampling import processed
from core.trace import Trace
from test_speculative import PROMPT, TOP2, TV_LIMIT, exact_joint, joint_tv, sampled_rows


def _pair(tokenizer, grid, head_seed=3, target=None):
    target = target or tiny_gpt(0)
    torch.manual_seed(head_seed)
    head = DraftHead.for_target(target).eval()
    return ModelPair("tiny", target, target, None, tokenizer, grid, lambda prompt, g: data.caption_ids(prompt, 32),
                     tokenizer.neighbours(tokenizer.vocab_size - 1), head_net=lambda: head)


@pytest.fixture(scope="module")
def tiny_tree_pair(tokenizer):
    return _pair(tokenizer, (16, 16))


def test_every_node_of_a_verified_tree_gets_the_distribution_of_a_cache_free_forward_of_its_path(tiny_tree_pair):
    pair = tiny_tree_pair
    s = SamplingConfig()
    ids, mask = pair.caption(PROMPT, pair.grid)
    dec = Decoder(pair.target, pair.grid, ids, mask, s, "cpu")
    dec.prefill(features=True)
    hd = trees.HeadDecoder(pair.draft_head(), dec)
    N = pair.grid[0] * pair.grid[1]
    final = np.full(N, -1, dtype=np.int64)
    gen = torch.Generator().manual_seed(0)
    final[:21] = torch.randint(0, 512, (21,), generator=gen).numpy()    # a committed prefix, root at cell 20
    root = 20
    dec.feed(list(range(root)), final[:root].tolist(), [True] * root)     # cells 0..19 in the cache
    hd.features.update({c: torch.randn(2, 64, generator=gen) for c in range(root + 1)})
    tree = trees.grow_dynamic(hd, root, final, total=20, depth=3, top_k=3)
    assert len(tree) >= 19 and max(tree.depth) == 3 and len(set(tree.depth)) == 3
    probs, _ = trees.verify(dec, tree, root, final)
    B = dec.captions.shape[0]
    for n in [-1, *range(len(tree))]:
        path = [] if n == -1 else [*tree.ancestors(n), n]
        tokens = torch.zeros(N, dtype=torch.long)
        tokens[:root + 1] = torch.from_numpy(final[:root + 1])
        for i, m in enumerate(path):
            tokens[root + 1 + i] = tree.token[m]
        last = root + len(path)
        visible = torch.arange(N) <= last
        logits = pair.target.forward_visible(dec.captions, dec.masks, tokens[None].expand(B, N), pair.grid, visible,
                                             drop=dec.drop)
        ref = processed(logits, s)[0, last]                                # row `last` predicts cell last + 1
        torch.testing.assert_close(probs[n + 1], ref, atol=2e-5, rtol=1e-4)


def test_a_node_that_reads_a_sibling_branch_differs_from_its_path():
    """Control of the mask itself: with every stand-in visible to every node the rows change."""
    t = trees.Tree(parent=[-1, -1, 0, 1], token=[1, 2, 3, 4], depth=[1, 1, 2, 2], q=[.5] * 4)
    m = t.mask()
    assert m.tolist() == [[False] * 4, [False] * 4, [True, False, False, False], [False, True, False, False]]


def test_greedy_eagle_equals_greedy_ar_token_for_token_with_the_shipped_head():
    s = SamplingConfig(temperature=0.0)
    ar = engine.run(RunConfig(method="ar", seed=3, sampling=s))
    eg = engine.run(RunConfig(method="eagle", seed=3, sampling=s))
    assert eg.tokens == ar.tokens
    assert eg.totals["passed_fraction"] > 0.05          # the head's drafts were accepted, not only resampled
    assert eg.totals["target_nfe"] < ar.totals["target_nfe"]


def four_token_target():
    """A random tiny target whose output head has four non-zero rows, w1, -w1, w2, -w2: under top_k = 2
    both its and the head's (the same output head) choices fall among those four, so that the
    head's drafts are accepted often and rejected often, and the joint of a row has 16 outcomes."""
    target = tiny_gpt(0)
    with torch.no_grad():
        w = target.output.weight
        w1, w2 = w[5].clone() * 4, w[9].clone() * 4
        w.zero_()
        w[5], w[6], w[9], w[10] = w1, -w1, w2, -w2
    return target


@pytest.fixture(scope="module")
def tree_row(tokenizer):
    pair = _pair(tokenizer, (1, 4), target=four_token_target())
    nb = pair.neighbours.clone()           # the four live tokens each other's nearest codes (the relaxed
    for row, near in ((5, (6, 9, 10)), (6, (5, 10, 9)), (9, (10, 5, 6)), (10, (9, 6, 5))):   # methods pool them)
        rest = [int(v) for v in nb[row] if int(v) not in near]
        nb[row] = torch.tensor([*near, *rest][:nb.shape[1]])
    pair.neighbours = nb
    return pair, exact_joint(pair, TOP2)


TREE_KNOBS = dict(tree_tokens=5, tree_depth=2, tree_top_k=2)


@pytest.mark.parametrize("method, knobs", [("eagle", {}), ("lantern_pp", dict(lantern_lambda=1.0)),
                                           ("lantern", dict(delta=0.0))])
def test_sampled_tree_methods_without_relaxation_sample_the_exact_joint(tree_row, method, knobs):
    pair, exact = tree_row
    rows, traces = sampled_rows(pair, method, **TREE_KNOBS, **knobs)
    verifies = [s for t in traces for s in t.steps if s["phase"] == "verify"]
    tried = [v for s in verifies for v in s["tree"]["verdict"]]
    assert tried.count(0) > 50 and tried.count(1) > 50      # siblings rejected and accepted, many times
    assert sum(bool(s["resampled"]) for s in verifies) > 20
    if method != "lantern_pp":   # its static tree's leaves at rank <= 1 are all at the row's end: no bonus cell
        assert sum(bool(s["bonus"]) for s in verifies) > 20
    assert joint_tv(rows, exact) < TV_LIMIT


def test_eagle_whose_rejected_sibling_keeps_its_mass_fails_the_same_test(tree_row, monkeypatch):
    """Negative control: the residual after a rejected child left unchanged (x keeps its mass)."""
    pair, exact = tree_row
    from core.methods import eagle
    monkeypatch.setattr(eagle, "point_rule", lambda p, x, q: (float(p[x]), p, None))
    rows, _ = sampled_rows(pair, "eagle", **TREE_KNOBS)
    assert joint_tv(rows, exact) > TV_LIMIT


def test_lantern_pp_with_the_relaxation_moves_the_joint(tree_row):
    """The relaxed methods are lossy by design: at lambda = 20 the same test sees it."""
    pair, exact = tree_row
    rows, _ = sampled_rows(pair, "lantern_pp", **TREE_KNOBS, lantern_lambda=20.0, lantern_k=8)
    assert joint_tv(rows, exact) > TV_LIMIT


def test_lantern_rule_accepts_with_the_relaxed_mass_and_removes_the_moved_neighbours():
    nb = torch.tensor([[1, 2, 3], [0, 2, 3], [3, 1, 0], [2, 1, 0]])
    p = torch.tensor([0.1, 0.15, 0.05, 0.7])
    a, rest, q = lantern.relaxed_point_rule(nb, 3, 0.2)(p, 0, None)
    # neighbours of 0: 1 (0.15), then 2 (0.05): 0.20 <= 0.2 moves both, 3 would pass the budget
    assert a == pytest.approx(0.30) and q is None
    torch.testing.assert_close(rest, torch.tensor([0.0, 0.0, 0.0, 1.0]))
    a0, rest0, _ = lantern.relaxed_point_rule(nb, 3, 0.0)(p, 0, None)       # delta 0: eagle's rule
    assert a0 == pytest.approx(0.1)
    torch.testing.assert_close(rest0, torch.tensor([0.0, 0.15, 0.05, 0.7]) / 0.9)


def test_lantern_pp_rule_bounds_the_moved_mass_by_lambda_and_takes_the_exact_residual():
    nb = torch.tensor([[1, 2, 3], [0, 2, 3], [3, 1, 0], [2, 1, 0]])
    p = torch.tensor([0.1, 0.15, 0.05, 0.7])
    q = torch.tensor([0.4, 0.2, 0.2, 0.2])
    a, rest, q_rest = lantern_pp.bounded_sampled_rule(nb, 3, 2.6)(p, 0, q)
    # budget (2.6 - 1) * 0.1 = 0.16: neighbour 1 (0.15) moves, 1 + 2 (0.20) would not
    p_relaxed = torch.tensor([0.25, 0.0, 0.05, 0.7])
    assert a == pytest.approx(0.25 / 0.4)
    torch.testing.assert_close(rest, (p_relaxed - q).clamp_min(0) / (p_relaxed - q).clamp_min(0).sum())
    torch.testing.assert_close(q_rest, torch.tensor([0.0, 1 / 3, 1 / 3, 1 / 3]))
    torch.testing.assert_close(relaxed_target(p[None], torch.tensor([0]), nb, 3, torch.tensor([0.16]))[0], p_relaxed)


def test_lantern_at_delta_zero_is_eagle_token_for_token(tiny_tree_pair):
    runs = [engine.run(RunConfig(method=m, seed=4, prompt=PROMPT).with_params(delta=0.0), tiny_tree_pair)
            for m in ("eagle", "lantern")]
    assert runs[0].tokens == runs[1].tokens and runs[0].totals == {**runs[1].totals, "wall_ms": runs[0].totals["wall_ms"]}


def test_passes_are_the_forwards_the_models_made(tiny_tree_pair, monkeypatch):
    target = PassCounter(tiny_tree_pair.target, monkeypatch)
    head = tiny_tree_pair.draft_head()
    calls = {"n": 0}
    original = head.forward_cells

    def counted(*a, **kw):
        calls["n"] += 1
        return original(*a, **kw)
    monkeypatch.setattr(head, "forward_cells", counted)
    tr = engine.run(RunConfig(method="eagle", seed=5, prompt=PROMPT), tiny_tree_pair)
    assert tr.totals["target_nfe"] == target.n and tr.totals["drafter_nfe"] == calls["n"]
    drafts = [s for s in tr.steps if s["phase"] == "draft"]
    depth = RunConfig().params.tree_depth
    assert all(s["nfe"] == depth for s in drafts[:-4])   # one head pass per level (the grid's end cuts)


def test_a_tree_trace_round_trips_and_a_bad_tree_is_refused(tiny_tree_pair):
    import json
    from core.trace import TraceError
    tr = engine.run(RunConfig(method="lantern_pp", seed=6, prompt=PROMPT), tiny_tree_pair)
    back = Trace.from_json(tr.to_json())
    assert list(back.steps) == list(tr.steps)
    d = json.loads(tr.to_json())
    verify = next(s for s in d["steps"] if s["phase"] == "verify")
    verify["tree"]["parent"][0] = 5                           # a node whose parent comes after it
    with pytest.raises(TraceError, match="tree"):
        Trace.from_json(json.dumps(d))


def test_a_pair_without_a_head_refuses_the_tree_methods_by_name(tiny_pair):
    from core.config import ParameterError
    for m in ("eagle", "lantern", "lantern_pp"):
        with pytest.raises(ParameterError, match=f"method {m}: .*EAGLE draft head.*tiny"):
            engine.run(RunConfig(method=m, prompt=PROMPT), tiny_pair)


def test_the_head_loads_a_lantern_format_state_dict_by_its_key_names():
    cfg = HeadConfig(vocab_size=64, dim=32, n_head=4, ffn_dim=48, norm_eps=1e-6)
    state = {k: v.clone() for k, v in DraftHead(cfg).state_dict().items()}
    assert sorted(state) == sorted(KEYS)
    assert HeadConfig.from_state(state, n_head=4, caption_slots=False) == cfg
    assert HeadConfig.from_state(state, n_head=4).caption_slots          # LANTERN trains with caption slots
    with pytest.raises(ValueError, match="missing fc.bias"):
        HeadConfig.from_state({k: v for k, v in state.items() if k != "fc.bias"}, n_head=4)


def test_lantern_relaxation_raises_acceptance_over_eagle(tiny_tree_pair):
    s = SamplingConfig(top_k=16)
    runs = [engine.run(RunConfig(method="lantern", prompt=PROMPT, seed=4, sampling=s).with_params(delta=d),
                       tiny_tree_pair) for d in (0.0, 0.5)]
    assert runs[1].totals["passed_fraction"] > runs[0].totals["passed_fraction"] + 0.05


def test_lantern_reports_the_relaxed_acceptance_of_each_first_child_from_cache_free_forwards(tree_row):
    """The first child tried at the root of each cycle: prob = min(1, p~(x)) (q = 1), p from a
    cache-free forward over the committed cells, at a delta and k where the relaxation moves mass."""
    from test_speculative import _relaxed_prob, cache_free_row
    pair, _ = tree_row
    checked = moved = 0
    for seed in range(8):
        t = engine.run(RunConfig(method="lantern", prompt=PROMPT, seed=seed, sampling=TOP2)
                       .with_params(**TREE_KNOBS, delta=0.9, lantern_k=3), pair)
        final = np.array(t.tokens).reshape(-1)
        for s in (s for s in t.steps if s["phase"] == "verify"):
            tree = s["tree"]
            root = s["judged"][0][1] - 1                    # the first child tried sits right after the root
            first = tree["parent"].index(-1)
            p = cache_free_row(pair, pair.target, final[:root + 1].tolist(), TOP2)
            x = tree["token"][first]
            expected = _relaxed_prob(p, torch.ones_like(p), x, pair.neighbours, 3, 0.9)
            assert abs(s["prob"][0] - expected) < 1e-4
            checked += 1
            moved += expected > float(p[x]) + 1e-3
    assert checked >= 8 and moved >= 2


@pytest.mark.parametrize("method", ["eagle", "lantern", "lantern_pp"])
def test_a_tree_run_is_a_function_of_its_seed_alone(tree_row, method):
    from test_speculative import assert_seed_alone
    assert_seed_alone(tree_row[0], method)


@pytest.mark.parametrize("method", ["eagle", "lantern", "lantern_pp"])
def test_no_tree_method_accepts_a_draft_of_probability_zero_even_when_u_is_zero(tree_row, method, monkeypatch):
    from test_speculative import assert_zero_never_accepted
    assert_zero_never_accepted(tree_row[0], method, monkeypatch)


def test_a_lantern_format_drafter_folder_loads_and_a_missing_one_is_named(tmp_path):
    """config.json + pytorch_model.bin with LANTERN's key names, as its training writes them (fp16)."""
    import json
    from core.models import llamagen
    from core.models.eagle import load_lantern
    cfg = HeadConfig(vocab_size=64, dim=32, n_head=4, ffn_dim=48, norm_eps=1e-6)
    ref = DraftHead(cfg)
    folder = llamagen.lantern_folder("llamagen-t2i", tmp_path)
    with pytest.raises(llamagen.MissingWeights, match="lantern-llamagen-t2i.*config.json and pytorch_model.bin"):
        llamagen._head_loader("llamagen-t2i", tmp_path, "cpu", torch.float32)()
    folder.mkdir()
    torch.save({k: v.half() for k, v in ref.state_dict().items()}, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(dict(num_attention_heads=4, rms_norm_eps=1e-6, hidden_size=32)))
    head = llamagen._head_loader("llamagen-t2i", tmp_path, "cpu", torch.float32)()
    assert head.cfg == HeadConfig(**{**cfg.to_dict(), "caption_slots": True})      # LANTERN trains with them
    torch.testing.assert_close(head.fc.weight, ref.fc.weight.half().float())
    torch.save({k: v for k, v in ref.state_dict().items() if k != "fc.bias"}, folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match="missing fc.bias"):
        load_lantern(folder)


@pytest.mark.long("vvs on both schedules and lantern on the shipped 32x32 pair")
def test_vvs_commits_unverified_paths_on_its_schedule_and_without_skips_is_lantern():
    """On the shipped pair (its trained head): interval 0 is lantern token for token; the released
    uniform schedule skips one cycle in five and saves target passes; dynamic skips where the paths agree."""
    run = lambda m, **kw: engine.run(RunConfig(method=m, prompt=PROMPT, seed=7).with_params(**kw))  # noqa: E731
    plain, none = run("lantern"), run("vvs", vvs_interval=0)
    assert none.tokens == plain.tokens
    uniform, dynamic = run("vvs"), run("vvs", vvs_schedule="dynamic")
    skipped = lambda t: [s for s in t.steps if s["phase"] == "decode" and s.get("verified") is False]  # noqa: E731
    cycles = sum(s["phase"] == "draft" for s in uniform.steps)
    assert abs(len(skipped(uniform)) - cycles / 5) <= 2
    assert 0 < len(skipped(dynamic)) and uniform.totals["target_nfe"] < plain.totals["target_nfe"]
    assert all(s["model"] == "drafter" and s["nfe"] == 0 for s in skipped(uniform))
