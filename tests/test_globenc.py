"""GlobEnc (``globenc``) on tiny BERT, DistilBERT and RoBERTa whose layer norms and biases are
random (a freshly built model has gamma = 1 and every bias 0, which would hide a swapped gamma or
a lost bias), against T_i(x_j) built here vector by vector in float64 from a float64 eager copy
of the model: its hidden states, per-head probabilities, values, W_O, both gammas and both
layer norms' real standard deviations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xai_ray.config import RunConfig
from xai_ray.model import capture
from xai_ray.model.loading import load_model
from xai_ray.scoring.rows import rows_to_scores

FAMILIES = ["bert", "distilbert", "roberta"]
TEXTS = [
    "The acting was unbelievable, playing wonderfully!",
    "good",
    "I loved the film and the story, not very boring.",
    "bad movie",
]
# Module names by their ending: BERT and RoBERTa first, DistilBERT second.
VALUE = (".attention.self.value", ".attention.v_lin")
OUTPUT = (".attention.output.dense", ".attention.out_lin")
NORM1 = (".attention.output.LayerNorm", ".sa_layer_norm")
NORM2 = (".output.LayerNorm", ".output_layer_norm")
# float32 capture against float64: norms of vectors of size ~10 through a Gram (squares, then a
# square root) keep about 6 significant digits; shares and their products are O(0.1).
ATOL = 1e-5


@pytest.fixture(scope="module")
def folder_of(tiny_model_factory, tmp_path_factory):
    """family -> a tiny model folder whose layer norms' weights and biases and every linear bias
    are drawn at random (seeded)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    made = {}
    for family in FAMILIES:
        source = tiny_model_factory(family)
        model = AutoModelForSequenceClassification.from_pretrained(source)
        generator = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, torch.nn.LayerNorm):
                    module.weight.copy_(0.5 + torch.rand(module.weight.shape, generator=generator))
                    module.bias.copy_(0.3 * torch.randn(module.bias.shape, generator=generator))
                elif isinstance(module, torch.nn.Linear) and module.bias is not None:
                    module.bias.copy_(0.3 * torch.randn(module.bias.shape, generator=generator))
        folder = tmp_path_factory.mktemp(f"globenc-{family}")
        model.save_pretrained(folder, safe_serialization=True)
        AutoTokenizer.from_pretrained(source).save_pretrained(folder)
        made[family] = str(folder)
    return made


def hand_layers(folder: str, text: str) -> list[dict]:
    """Per layer, in float64 from an eager float64 copy of the model: x (n, D) its input, probs
    (H, n, n), values (n, H*d), W_O (D, H*d), b_O, gamma1, beta1, gamma2, and the first norm's
    input and output and the second norm's input (n, D), with the norms' eps."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, attn_implementation="eager")
    model = model.double().eval()
    named = dict(model.named_modules())
    seen: dict[str, list] = {"values": [], "norm1_in": [], "norm1_out": [], "norm2_in": []}

    def keep(key, what):
        return lambda module, args, out: seen[key].append((args[0] if what == "in" else out)[0])

    hooks = []
    for name, module in named.items():
        if name.endswith(VALUE):
            hooks.append(module.register_forward_hook(keep("values", "out")))
        elif name.endswith(NORM1):
            hooks += [module.register_forward_hook(keep("norm1_in", "in"))]
            hooks += [module.register_forward_hook(keep("norm1_out", "out"))]
        elif name.endswith(NORM2):  # after NORM1: BERT's first norm's name ends with .output.LayerNorm too
            hooks.append(module.register_forward_hook(keep("norm2_in", "in")))
    encoding = tokenizer(text, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        outputs = model(**encoding, output_attentions=True, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    outputs_ = [named[n] for n in named if n.endswith(OUTPUT)]
    norms1 = [named[n] for n in named if n.endswith(NORM1)]
    norms2 = [named[n] for n in named if n.endswith(NORM2) and not n.endswith(NORM1)]
    layers = []
    for index, attention in enumerate(outputs.attentions):
        layers.append(
            {
                "x": outputs.hidden_states[index][0],  # the layer's input
                "probs": attention[0],
                "values": seen["values"][index],
                "W_O": outputs_[index].weight.detach(),
                "b_O": outputs_[index].bias.detach(),
                "gamma1": norms1[index].weight.detach(),
                "beta1": norms1[index].bias.detach(),
                "gamma2": norms2[index].weight.detach(),
                "eps1": norms1[index].eps,
                "eps2": norms2[index].eps,
                **{key: seen[key][index] for key in ("norm1_in", "norm1_out", "norm2_in")},
            }
        )
    assert len(layers) == len(outputs_) == len(norms1) == len(norms2) > 0
    return layers


def centred(vector: torch.Tensor) -> torch.Tensor:
    return vector - vector.mean()


def sigma(rows: torch.Tensor, eps: float) -> torch.Tensor:
    """(n, D) a layer norm's input -> (n,) the standard deviation it divides by."""
    return torch.sqrt(((rows - rows.mean(dim=1, keepdim=True)) ** 2).mean(dim=1) + eps)


def z_vectors(layer: dict) -> torch.Tensor:
    """(n, n, D): z_ij = sum_h alpha^h_ij v^h_j W_O^h + [i == j] x_j, one vector at a time."""
    probs, values, weight, x = layer["probs"], layer["values"], layer["W_O"], layer["x"]
    heads, n, _ = probs.shape
    size = values.shape[1] // heads
    z = torch.zeros(n, n, weight.shape[0], dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            for h in range(heads):
                block = slice(h * size, (h + 1) * size)
                z[i, j] += probs[h, i, j] * (weight[:, block] @ values[j, block])
            if i == j:
                z[i, j] += x[j]
    return z


def hand_norms(layer: dict, with_sigmas: bool = True) -> np.ndarray:
    """(n, n) N_ij = ||gamma2 * C(gamma1 * C(z_ij))|| / (sigma1_i sigma2_i) (no sigmas: the capture's)."""
    z = z_vectors(layer)
    n = z.shape[0]
    sigma1, sigma2 = sigma(layer["norm1_in"], layer["eps1"]), sigma(layer["norm2_in"], layer["eps2"])
    norms = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            t = layer["gamma2"] * centred(layer["gamma1"] * centred(z[i, j]))
            if with_sigmas:
                t = t / (sigma1[i] * sigma2[i])
            norms[i, j] = float(t.norm())
    return norms


def hand_globenc(folder: str, text: str, start_layer: int = 1) -> np.ndarray:
    """(L, n) [CLS] rows of R_l = N~_l R_(l-1), full matrices, no identity added; NaN below start_layer."""
    layers = hand_layers(folder, text)
    n = layers[0]["x"].shape[0]
    out, rolled = np.full((len(layers), n), np.nan), np.eye(n)
    for index in range(start_layer - 1, len(layers)):
        norms = hand_norms(layers[index])
        rolled = (norms / norms.sum(axis=1, keepdims=True)) @ rolled
        out[index] = rolled[0]
    return out


def score(folder: str, methods=("raw", "globenc"), **options) -> dict:
    from xai_ray.scoring.actor import Scorer

    scorer = Scorer({"model": folder, "max_length": 32, "methods": list(methods), **options})
    table = scorer({"doc_id": [f"d{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": [1, 0, 1, 0]})
    rows = {row["doc_id"]: row for row in table.to_pylist()}
    assert all(row["error"] is None for row in rows.values())
    return rows


@pytest.mark.parametrize(
    "family,options",
    [("bert", {}), ("distilbert", {}), ("roberta", {}), ("bert", {"residual": "none", "start_layer": 2})],
)
def test_globenc_matches_the_hand_computation_inside_a_padded_batch(family, options, folder_of):
    rows = score(folder_of[family], ("raw", "norm_rollout", "globenc"), **options)
    for i, text in enumerate(TEXTS):
        expected = hand_globenc(folder_of[family], text, options.get("start_layer", 1))
        got = rows_to_scores(rows[f"d{i}"], "globenc")
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=ATOL)  # NaN where expected is NaN
        defined = expected[~np.isnan(expected).any(axis=1)]
        np.testing.assert_allclose(defined.sum(axis=1), 1.0, atol=1e-9)  # rows of row-stochastic products
    longest = rows["d2"]  # not raw attention, nor norm-based attention's rollout, under another name
    for other in ("raw", "norm_rollout"):
        assert np.nanmax(np.abs(rows_to_scores(longest, "globenc") - rows_to_scores(longest, other))) > 1e-3


@pytest.mark.parametrize("family", FAMILIES)
def test_the_pieces_are_the_layers_own_and_the_capture_measures_them(family, folder_of):
    folder = folder_of[family]
    loaded = load_model(folder)
    for text in TEXTS[:3]:
        layers = hand_layers(folder, text)
        for layer in layers:
            # sum_j gamma1 C(z_ij) / sigma1_i + gamma1 C(b_O) / sigma1_i + beta1 is the first norm's output
            z, sigma1 = z_vectors(layer), sigma(layer["norm1_in"], layer["eps1"])
            for i in range(z.shape[0]):
                pieces = sum(layer["gamma1"] * centred(z[i, j]) for j in range(z.shape[1]))
                rebuilt = (pieces + layer["gamma1"] * centred(layer["b_O"])) / sigma1[i] + layer["beta1"]
                np.testing.assert_allclose(rebuilt.numpy(), layer["norm1_out"][i].numpy(), rtol=1e-10, atol=1e-10)
        encoding = loaded.tokenizer(text, truncation=True, max_length=32, return_tensors="pt")
        for batched in (False, True):
            _, _, captured = capture.forward_with_attention(loaded.model, dict(encoding), batched=batched, globenc=True)
            for index, layer in enumerate(layers):  # the capture's norms: ||A z_ij||, sigmas left out
                expected = hand_norms(layer, with_sigmas=False)
                np.testing.assert_allclose(captured[0, index].numpy(), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_globenc_capture_is_the_same_alone_batched_and_per_document(family, folder_of):
    loaded = load_model(folder_of[family])
    encoding = loaded.tokenizer(TEXTS, truncation=True, max_length=32, padding=True, return_tensors="pt")
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    _, _, loop = capture.forward_with_attention(loaded.model, dict(encoding), batched=False, globenc=True)
    _, _, batched = capture.forward_with_attention(loaded.model, dict(encoding), batched=True, globenc=True)
    np.testing.assert_allclose(batched.numpy(), loop.numpy(), rtol=1e-4, atol=1e-4)
    for b, n in enumerate(lengths):
        for norms in (loop, batched):  # padding is inert: its rows and columns stay exactly 0
            assert float(norms[b, :, n:, :].abs().sum()) == 0 and float(norms[b, :, :, n:].abs().sum()) == 0
            assert float(norms[b, :, :n, :n].min()) >= 0 and float(norms[b, :, 0, :n].sum()) > 0
        alone = loaded.tokenizer([TEXTS[b]], truncation=True, max_length=32, return_tensors="pt")
        _, _, single = capture.forward_with_attention(loaded.model, dict(alone), batched=True, globenc=True)
        np.testing.assert_allclose(batched[b, :, :n, :n].numpy(), single[0].numpy(), rtol=1e-4, atol=1e-4)
    # asked together, norm-based attention and GlobEnc come from one pass, each as asked alone
    _, _, norms, both = capture.forward_with_attention(loaded.model, dict(encoding), norms=True, globenc=True)
    _, _, norms_alone = capture.forward_with_attention(loaded.model, dict(encoding), norms=True)
    assert torch.equal(both, loop) and torch.equal(norms, norms_alone)


def test_globenc_is_accepted_by_the_run_config_and_refused_where_it_cannot_run(tiny_model_factory):
    assert RunConfig(model="m", methods=("raw", "globenc")).methods == ("raw", "globenc")
    eager = load_model(tiny_model_factory("bert"), attn_implementation="eager")
    encoding = dict(eager.tokenizer(["good"], return_tensors="pt"))
    with pytest.raises(RuntimeError, match="globenc methods? needs? the model loaded with the xai_capture"):
        capture.forward_with_attention(eager.model, encoding, globenc=True)
    loaded = load_model(tiny_model_factory("bert"))
    for layer in loaded.model.bert.encoder.layer:  # a model whose second layer norm is not one it knows
        layer.output.LayerNorm = torch.nn.Identity()
    with pytest.raises(RuntimeError, match=r"^the globenc method needs .* output\.LayerNorm"):
        capture.forward_with_attention(loaded.model, encoding, globenc=True)


def test_a_long_review_in_windows_gets_globenc_shares_for_every_word(folder_of):
    from xai_ray.scoring.actor import Scorer

    config = {"model": folder_of["bert"], "max_length": 24, "methods": ["globenc"], "long_text": "window"}
    text = " ".join(["the acting was good but the plot was boring and long"] * 12)
    (row,) = Scorer(config)({"doc_id": ["long"], "text": [text], "label": [1]}).to_pylist()
    assert row["error"] is None and not row["truncated"] and row["n_tokens"] > 24
    n_words = len(row["words"])
    assert n_words == len(text.split())
    shares = np.asarray(row["word_scores_globenc"]).reshape(row["n_layers"], n_words)
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-5)
    assert (shares > 0).all()  # every word reached from its window


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_run_with_methods_raw_globenc_stores_the_hand_computed_scores(tmp_path, folder_of):
    ray = pytest.importorskip("ray")
    import pandas as pd

    from xai_ray import cli
    from xai_ray.query.connection import open_store

    pd.DataFrame({"id": [f"t{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": [1, 0, 1, 0]}).to_parquet(
        tmp_path / "corpus.parquet"
    )
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        status = cli.main(
            ["run", "--data", str(tmp_path / "corpus.parquet"), "--model", folder_of["distilbert"]]
            + ["--max-length", "32", "--actors", "1", "--store", str(tmp_path / "store"), "--run-id", "globenc"]
            + ["--set", "methods=raw,globenc", "--set", "batch_size=3"]
        )
    finally:
        ray.shutdown()
    assert status == 0
    con = open_store(tmp_path / "store")
    assert dict(con.execute("select method, count(distinct doc_id) from tokens group by method").fetchall()) == {
        "raw": 4,
        "globenc": 4,
    }
    words = con.execute("select doc_id, layer, sum(score) from words where method = 'globenc' group by all").fetchall()
    np.testing.assert_allclose([total for _, _, total in words], 1.0, atol=1e-5)
    stored = con.execute(
        "select layer, position, score from tokens where method = 'globenc' and doc_id = 't2' order by layer, position"
    ).fetchall()
    expected = hand_globenc(folder_of["distilbert"], TEXTS[2])
    got = np.zeros_like(expected)
    for layer, position, value in stored:
        got[layer - 1, position] = value
    assert len(stored) == expected.size
    np.testing.assert_allclose(got, expected, atol=ATOL)
