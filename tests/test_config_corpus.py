"""Config precedence and validation, corpus readers, and the one-sentence errors users see."""

from __future__ import annotations

import io
import tarfile

import pandas as pd
import pytest

from xai_ray import cli
from xai_ray.config import ConfigError, resolve
from xai_ray.data.corpus import CorpusError, clean_text, read_corpus
from xai_ray.model.loading import ModelError, load_model

ROWS = [
    {"id": "a", "text": "Great<br />film.", "label": 1},
    {"id": "b", "text": "Awful <BR> acting", "label": 0},
    {"id": "c", "text": "Fine", "label": 1},
]


def test_precedence_defaults_yaml_flags_set(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("model: minilm\nmax_length: 128\nbatch_size: 8\nmethods: [raw]\n")
    cfg = resolve(config, {"max_length": 64, "batch_size": None}, ["batch_size=4", "residual=none"])
    assert cfg.model == "minilm"  # from YAML
    assert cfg.max_length == 64  # flag beats YAML
    assert cfg.batch_size == 4  # --set beats YAML; a None flag is "not given"
    assert cfg.residual == "none" and cfg.methods == ("raw",)
    assert cfg.split == "test"  # default


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["methods=raw,nope"], "unknown method 'nope'"),
        (["residul=add"], "did you mean 'residual'"),
        (["residual=twice"], "residual must be one of"),
        (["residual=add"], "equals residual=half"),
        (["discard_ratio=1.5"], "discard_ratio must be in [0, 1)"),
        (["max_length=2"], "max_length"),
        (["run_id=../escape"], "run_id"),
        (["run_id=-x"], "must not start with '-'"),
        (["run_id=.hidden"], "must not start with '-' or '.'"),
        (["nonsense"], "--set expects key=value"),
    ],
)
def test_bad_config_values_are_named(sets, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[").replace(")", r"\)")):
        resolve(None, {}, sets)


def test_clean_text_turns_html_breaks_into_spaces_only():
    assert clean_text("a<br />b<BR>c<br/>d") == "a b c d"
    assert clean_text("<script>x</script>") == "<script>x</script>"  # other markup stays data


@pytest.mark.parametrize("kind", ["parquet", "csv", "jsonl", "folder"])
def test_readers_give_the_same_rows(tmp_path, kind):
    frame = pd.DataFrame(ROWS)
    if kind == "parquet":
        source = tmp_path / "c.parquet"
        frame.to_parquet(source)
    elif kind == "csv":
        source = tmp_path / "c.csv"
        frame.to_csv(source, index=False)
    elif kind == "jsonl":
        source = tmp_path / "c.jsonl"
        frame.to_json(source, orient="records", lines=True)
    else:
        source = tmp_path / "parts"
        source.mkdir()
        frame.iloc[:2].to_parquet(source / "p0.parquet")
        frame.iloc[2:].to_parquet(source / "p1.parquet")
    got = read_corpus(str(source))
    assert got.doc_id.tolist() == ["a", "b", "c"]
    assert got.text.tolist() == ["Great film.", "Awful   acting", "Fine"]
    assert got.label.tolist() == [1, 0, 1]


def _aclimdb_files():
    return {
        "aclImdb/train/pos/7_9.txt": "Loved it<br />truly",
        "aclImdb/train/neg/3_2.txt": "Hated it",
        "aclImdb/test/pos/1_8.txt": "Other split",
        "aclImdb/train/unsup/5_0.txt": "No label",
    }


def test_aclimdb_folder_and_tarball(tmp_path):
    folder = tmp_path / "dl"
    for name, text in _aclimdb_files().items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    archive = tmp_path / "aclImdb_v1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in _aclimdb_files().items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for source in (folder, folder / "aclImdb", archive):
        got = read_corpus(str(source), split="train").sort_values("doc_id")
        assert got.doc_id.tolist() == ["train_neg_3", "train_pos_7"]
        assert got.label.tolist() == [0, 1]
        assert got.text.tolist() == ["Hated it", "Loved it truly"]


def test_limit_is_a_seeded_sample_in_source_order(tmp_path):
    source = tmp_path / "c.parquet"
    pd.DataFrame(
        {"id": [f"d{i:03d}" for i in range(100)], "text": ["t"] * 100, "label": [0] * 50 + [1] * 50}
    ).to_parquet(source)
    first = read_corpus(str(source), limit=10, seed=3)
    assert first.doc_id.tolist() == read_corpus(str(source), limit=10, seed=3).doc_id.tolist()
    assert first.doc_id.tolist() == sorted(first.doc_id)
    assert first.label.nunique() == 2  # not just the first rows, which are all one class


def test_missing_columns_and_files_are_one_sentence(tmp_path):
    source = tmp_path / "c.csv"
    pd.DataFrame({"review": ["x"]}).to_csv(source, index=False)
    with pytest.raises(CorpusError, match="no text column 'text'.*--set text_column"):
        read_corpus(str(source))
    with pytest.raises(CorpusError, match="does not exist"):
        read_corpus(str(tmp_path / "missing.parquet"))
    with pytest.raises(CorpusError, match="data path 'incoming/' does not exist"):  # not a Hub dataset id
        read_corpus("incoming/")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(CorpusError, match="cannot be read"):
        read_corpus(str(broken))


def test_offline_hub_ids_fail_with_the_offline_form(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(CorpusError, match="offline, pass a local path"):
        read_corpus("stanfordnlp/imdb")
    with pytest.raises(ModelError, match="--model minilm"):
        load_model("textattack/bert-base-uncased-imdb")


def test_cli_reports_user_errors_without_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status = cli.main(["run", "--data", str(tmp_path / "nope.csv"), "--model", "minilm", "--store", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and "does not exist" in err and "Traceback" not in err
    assert cli.main(["run", "--methods", "raw,bogus"]) == 2
    assert "unknown method 'bogus'" in capsys.readouterr().err
    assert cli.main(["topk", "--store", str(tmp_path / "empty")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["run", "--config", str(tmp_path)]) == 2  # a folder is there: it is not missing
    assert f"config file {str(tmp_path)!r} is a folder; name the YAML file itself" in capsys.readouterr().err


def test_decoder_and_pickle_only_models_are_refused(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_head=1, n_embd=8).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ModelError, match="not an encoder classifier"):
        load_model(str(tmp_path / "gpt2"))
    from transformers import BertConfig

    BertConfig(num_hidden_layers=1, num_attention_heads=1, hidden_size=8, intermediate_size=8).save_pretrained(
        tmp_path / "bert"
    )
    (tmp_path / "bert" / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ModelError, match="no .safetensors weights"):
        load_model(str(tmp_path / "bert"))


@pytest.mark.parametrize(
    "classes,expected",
    [
        ({0: "positive", 1: "negative"}, {"train_pos_7": 0, "train_neg_3": 1}),  # the model's order, not the folder's
        ({0: "NEGATIVE", 1: "neutral", 2: "POSITIVE"}, {"train_pos_7": 2, "train_neg_3": 0}),
        ({0: "neg", 1: "pos"}, {"train_pos_7": 1, "train_neg_3": 0}),
        ([0, 1], {"train_pos_7": 1, "train_neg_3": 0}),  # no names: the dataset's own numbers
    ],
)
def test_an_aclimdb_folders_names_are_matched_to_the_models_classes(tmp_path, classes, expected):
    """aclImdb's pos and neg folders name classes: a model that lists positive first, or has a
    neutral class between, got neg as class 0 and pos as class 1 whatever its classes were."""
    from xai_ray.data.screening import screen

    for name, text in _aclimdb_files().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    kept, rejected = screen(read_corpus(str(tmp_path / "aclImdb"), split="train"), classes)
    assert rejected.empty
    assert dict(zip(kept.doc_id, kept.label)) == expected


def test_an_aclimdb_folder_that_names_no_class_is_an_errors_row(tmp_path):
    from xai_ray.data.screening import screen

    for name, text in _aclimdb_files().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    kept, rejected = screen(read_corpus(str(tmp_path / "aclImdb"), split="train"), {0: "bad", 1: "good"})
    assert kept.empty
    assert dict(zip(rejected.doc_id, rejected.reason)) == {
        doc_id: f"label {folder!r} is not a class number nor one of the model's class names (0: bad, 1: good); "
        "use --set label_column=none to score without labels"
        for doc_id, folder in (("train_pos_7", "pos"), ("train_neg_3", "neg"))
    }


def test_pos_and_neg_name_positive_and_negative_only_where_no_class_has_their_name():
    from xai_ray.data.screening import by_name

    assert by_name("pos", {0: "NEGATIVE", 1: "POSITIVE"}) == (1, None)
    assert by_name(" Neg ", {0: "negative", 1: "positive"}) == (0, None)
    assert by_name("positive", {0: "neg", 1: "pos"}) == (1, None)
    assert by_name("pos", {0: "pos", 1: "positive"}) == (0, None)  # its own name first
    assert by_name("pos", {0: "Positive", 1: "positive"})[0] is None  # two classes it could mean
    assert by_name("posit", {0: "negative", 1: "positive"})[0] is None


def test_a_csv_with_two_columns_of_one_name_says_which_one_is_read(tmp_path, caplog):
    """The first "text" was scored without a word; the same file as Parquet is refused, since
    Parquet gives the second column no name of its own. A CSV's second is ``text.1``, as pandas names it."""
    source = tmp_path / "dup.csv"
    source.write_text("id,text,text,label\n1,first text,second text,1\n2,c,d,0\n")
    with caplog.at_level("WARNING", logger="xai_ray"):
        assert read_corpus(str(source)).text.tolist() == ["first text", "c"]
    assert f"{str(source)!r} has columns of one name: 'text' again as 'text.1'" in caplog.text
    assert read_corpus(str(source), text_column="text.1").text.tolist() == ["second text", "d"]


def test_an_aclimdb_folder_read_without_labels_stays_unlabelled(tmp_path):
    """Its folder's name came back as the label under --set label_column=none (and, for a model
    whose classes neither folder names, every review was refused, asking for that very option)."""
    from xai_ray.data.screening import screen

    for name, text in _aclimdb_files().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    corpus = read_corpus(str(tmp_path / "aclImdb"), split="train", label_column="none")
    for classes in ({0: "negative", 1: "positive"}, {0: "bad", 1: "good"}):
        kept, rejected = screen(corpus, classes)
        assert rejected.empty and sorted(kept.doc_id) == ["train_neg_3", "train_pos_7"]
        assert kept.label.isna().all()
