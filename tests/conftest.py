"""Shared fixtures: tiny seeded random encoders with tokenizers built in code (no downloads).

Three families are covered: BERT and DistilBERT with a hand-written WordPiece vocabulary, and
RoBERTa with a byte-level BPE trained here on a few sentences. Each model is saved with
safetensors weights next to its fast tokenizer in a session temp folder, so
``xai_ray.model.loading.load_model(folder)`` and ``xai_ray.scoring.actor.Scorer`` load them like a real checkpoint.
"""

from __future__ import annotations

import pytest

FAMILIES = ("bert", "distilbert", "roberta")

# Whole words plus "##" pieces so that e.g. "unbelievable" -> un ##believ ##able and
# "films" -> film ##s, "playing" -> play ##ing.
WORDPIECE_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "a",
    "an",
    "film",
    "movie",
    "was",
    "is",
    "good",
    "bad",
    "not",
    "very",
    "and",
    "i",
    "it",
    "great",
    "plot",
    "acting",
    "loved",
    "fine",
    "story",
    "this",
    "of",
    "boring",
    ",",
    ".",
    "!",
    "?",
    "'",
    "un",
    "##believ",
    "##able",
    "##s",
    "play",
    "##ing",
    "##ly",
    "##ed",
    "wonder",
    "##ful",
]

BPE_CORPUS = [
    "the film was good",
    "the movie was bad",
    "a great plot and fine acting",
    "not very good, not very bad.",
    "the acting was wonderful!",
    "i loved the film and the story",
    "this movie is boring",
    "it was playing the story",
]

SPECIAL_WORDPIECE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPECIAL_BPE = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def build_wordpiece_tokenizer(cls=None):
    """A BERT-style fast tokenizer (lower-casing WordPiece, [CLS] ... [SEP]) built in code."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    if cls is None:
        from transformers import BertTokenizerFast as cls

    vocab = {token: i for i, token in enumerate(WORDPIECE_VOCAB)}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    backend.decoder = decoders.WordPiece()
    return cls(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def build_bpe_tokenizer():
    """A RoBERTa-style byte-level BPE fast tokenizer (<s> ... </s>) trained here on a few sentences."""
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import RobertaTokenizerFast

    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(
        BPE_CORPUS * 3, vocab_size=300, min_frequency=2, special_tokens=SPECIAL_BPE, show_progress=False
    )
    backend = trainer._tokenizer
    backend.post_processor = processors.RobertaProcessing(
        ("</s>", backend.token_to_id("</s>")),
        ("<s>", backend.token_to_id("<s>")),
        trim_offsets=True,
        add_prefix_space=False,
    )
    return RobertaTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


THREE_CLASSES = {0: "negative", 1: "neutral", 2: "positive"}


def build_tiny_model(family: str, seed: int = 0, classes: int = 2):
    """(model, tokenizer) of a tiny seeded random classifier with eager attention and 64 positions.

    BERT: 2 layers x 2 heads, hidden 16; DistilBERT: 3 x 4, hidden 16; RoBERTa: 3 x 3, hidden 24.
    ``initializer_range=0.5`` makes attention peaked instead of near-uniform, so a padding leak or
    a wrong reduction shows up clearly in the scores. ``classes=3``: a head of three named classes
    (``THREE_CLASSES``); two classes keep transformers' LABEL_i placeholders.
    """
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        DistilBertConfig,
        DistilBertForSequenceClassification,
        DistilBertTokenizerFast,
        RobertaConfig,
        RobertaForSequenceClassification,
    )

    torch.manual_seed(seed)
    labels = (
        {"num_labels": 2}
        if classes == 2
        else {"id2label": THREE_CLASSES, "label2id": {v: k for k, v in THREE_CLASSES.items()}}
    )
    if family == "bert":
        tokenizer = build_wordpiece_tokenizer()
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
            **labels,
            pad_token_id=tokenizer.pad_token_id,
            initializer_range=0.5,
            attn_implementation="eager",
        )
        model = BertForSequenceClassification(config)
    elif family == "distilbert":
        tokenizer = build_wordpiece_tokenizer(DistilBertTokenizerFast)
        config = DistilBertConfig(
            vocab_size=len(tokenizer),
            dim=16,
            n_layers=3,
            n_heads=4,
            hidden_dim=32,
            max_position_embeddings=64,
            **labels,
            pad_token_id=tokenizer.pad_token_id,
            initializer_range=0.5,
            attn_implementation="eager",
        )
        model = DistilBertForSequenceClassification(config)
    elif family == "roberta":
        tokenizer = build_bpe_tokenizer()
        config = RobertaConfig(
            vocab_size=len(tokenizer),
            hidden_size=24,
            num_hidden_layers=3,
            num_attention_heads=3,
            intermediate_size=32,
            max_position_embeddings=64,
            **labels,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            initializer_range=0.5,
            attn_implementation="eager",
        )
        model = RobertaForSequenceClassification(config)
    else:
        raise ValueError(family)
    model.eval()
    return model, tokenizer


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests run where CUDA is present and are skipped, with the reason, everywhere else."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def wordpiece_tokenizer():
    return build_wordpiece_tokenizer()


@pytest.fixture(scope="session")
def bpe_tokenizer():
    return build_bpe_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory):
    """``factory(family, classes=2) -> folder`` holding safetensors weights and the tokenizer; built
    once per family and class count."""
    built: dict[tuple, str] = {}

    def factory(family: str, classes: int = 2) -> str:
        if (family, classes) not in built:
            model, tokenizer = build_tiny_model(family, classes=classes)
            folder = tmp_path_factory.mktemp(f"tiny-{family}-{classes}")
            model.save_pretrained(folder, safe_serialization=True)
            tokenizer.save_pretrained(folder)
            built[family, classes] = str(folder)
        return built[family, classes]

    return factory


@pytest.fixture(scope="session", params=FAMILIES)
def tiny_model_dir(request, tiny_model_factory):
    """Folder of a tiny random classifier, parametrised over BERT, DistilBERT and RoBERTa."""
    return tiny_model_factory(request.param)


@pytest.fixture(scope="session")
def tiny_bert_dir(tiny_model_factory):
    return tiny_model_factory("bert")


@pytest.fixture(scope="session")
def tiny_distilbert_dir(tiny_model_factory):
    return tiny_model_factory("distilbert")


@pytest.fixture(scope="session")
def tiny_roberta_dir(tiny_model_factory):
    return tiny_model_factory("roberta")


@pytest.fixture(scope="session")
def scorer_factory(tiny_model_factory):
    """``factory(family, **overrides) -> Scorer`` over the tiny model (raw and rollout, max_length 32), cached."""
    cache: dict = {}

    def factory(family: str, **overrides):
        from xai_ray.scoring.actor import Scorer

        key = (family, tuple(sorted(overrides.items())))
        if key not in cache:
            config = {"model": tiny_model_factory(family), "max_length": 32, "methods": ["raw", "rollout"]}
            config.update(overrides)
            cache[key] = Scorer(config)
        return cache[key]

    return factory


@pytest.fixture(autouse=True)
def _ray_let_go():
    """A command run in-process lets its Ray go on a thread (``runtime.release_if_done``) and
    returns: that shutdown is waited for after the test, so the next module's ``ray.init`` never
    finds Ray still going."""
    yield
    from xai_ray import runtime

    runtime.wait_for_release()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster (2 CPUs, no dashboard) for one test module; joins one already started."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def chromium():
    """``command(tmp_path, net_log=None) -> argv`` of Debian's headless chromium with a fresh profile and
    no background traffic (a net log records every request the page makes); skips without chromium."""
    import shutil

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("needs Debian's chromium (scripts/test.sh installs it)")

    def command(tmp_path, net_log=None) -> list[str]:
        argv = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-sync",
            "--disable-quic",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=15000",
        ]
        return argv + ([f"--log-net-log={net_log}"] if net_log else [])

    return command
