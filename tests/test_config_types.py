"""Every config value is checked against its declared type and range where it comes in (YAML, flags,
``--set``): a wrong one is one sentence naming the key and the value, exit status 2, nothing started.
And every help page of the program prints."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields

import pytest

from xai_ray import cli
from xai_ray.config import RULES, ConfigError, RunConfig, resolve
from xai_ray.train import settings as finetune_settings

# (--set item, words the one-sentence error must contain)
WRONG = [
    # safety gates take booleans only: the YAML string "false" is truthy in Python
    ('trust_remote_code="false"', ["trust_remote_code", "true or false", "'false'"]),
    ("trust_remote_code='no'", ["trust_remote_code", "true or false"]),
    ("trust_remote_code=0", ["trust_remote_code", "true or false"]),
    ('allow_pickle="false"', ["allow_pickle", "true or false"]),
    ("allow_pickle=[]", ["allow_pickle", "true or false"]),
    ("heads=maybe", ["heads", "true or false", "'maybe'"]),
    ("clean_html=1", ["clean_html", "true or false"]),
    # integers
    ("batch_size=2.5", ["batch_size", "integer", "2.5"]),
    ("batch_size=true", ["batch_size", "integer", "True"]),
    ("batch_size=0", ["batch_size", "in [1, 1000000]", "0"]),
    ("max_tokens_per_batch=1.5e4x", ["max_tokens_per_batch", "integer"]),
    ("limit=-3", ["limit", ">= 1"]),
    ("seed=-1", ["seed", "in [0, 4294967295]"]),
    ("ig_steps=[1, 2]", ["ig_steps", "integer"]),
    ("actors=.inf", ["actors", "integer"]),
    # numbers
    ("discard_ratio=nan", ["discard_ratio", "number"]),
    ("discard_ratio=.nan", ["discard_ratio", "number"]),
    ("discard_ratio=1", ["discard_ratio", "in [0, 1)"]),
    ("cpus_per_actor=0", ["cpus_per_actor", "in (0, 1024]"]),
    ("gpus_per_actor=-1", ["gpus_per_actor", "in [0, 64]"]),
    ("evaluate_share=0", ["evaluate_share", "in (0, 1]"]),
    ("max_error_share=1.5", ["max_error_share", "in [0, 1]"]),
    ("evaluate_fractions=0.1,x", ["evaluate_fractions", "list of numbers"]),
    ("evaluate_fractions=[0.1, 0.1]", ["evaluate_fractions must differ at two decimals"]),
    ("evaluate_fractions=[0.001, 1]", ["evaluate_fractions must be shares in [0.005, 1]"]),  # @0.00 read "nothing"
    # text and choices
    ("model=", ["model", "null"]),
    ("model=''", ["model", "must not be empty"]),
    ("store=' '", ["store", "must not be empty"]),
    ("model=2.5", ["model", "text", "2.5"]),
    ("long_text=sideways", ["long_text", "one of auto, head, head_tail, window"]),
    ("head_fusion=median", ["head_fusion", "one of mean, max, min"]),
    ("residual=add", ["residual=half"]),
    ("methods=[1, 2]", ["methods", "list of names"]),
    ("methods=raw,rollout,raw", ["methods names raw more than once"]),  # a second copy's columns clash
    ("extra=[1]", ["extra", "mapping"]),
    ("extra={c: .nan}", ["extra must hold finite numbers only"]),  # the manifest's JSON said NaN
    ("extra={a: [1, -.inf]}", ["extra must hold finite numbers only"]),
    ("seed=1" + "0" * 400, ["seed", "beyond any setting's range"]),  # was an OverflowError's traceback
    ("max_error_share=-1" + "0" * 400, ["max_error_share", "beyond any setting's range"]),
    # not a key, not a plain YAML value
    ("batch_sise=4", ["unknown config key 'batch_sise'", "batch_size"]),
    ("model=!!python/name:os.system", ["--set model", "not a plain YAML value"]),
    ("model=*nope", ["--set model", "not a plain YAML value"]),
    # YAML 1.1's other numbers (1:00 was 60, base 60) and aliases (a 409-byte bomb took 9 GB; a
    # self-naming one a RecursionError's traceback)
    ("limit=1:00", ["limit", "integer", "'1:00'"]),
    ("limit=0x10", ["limit", "integer", "'0x10'"]),
    # Python's int() reads these too; no config file means them as numbers
    ("ig_steps=1_000", ["ig_steps", "integer", "'1_000'"]),
    ("limit=\u0661\u0662", ["limit", "integer"]),  # Arabic-Indic 12
    ("extra=&a {x: *a}", ["--set extra", "the alias *a is not allowed"]),
    ("extra={a: &b [1, 2], c: *b}", ["--set extra", "the alias *b is not allowed"]),
    ("nokey", ["--set expects key=value"]),
    # values no config holds, which the manifest stored as their text
    ("extra={a: !!binary aGVsbG8=}", ["--set extra", "not a plain YAML value", "binary"]),
    ("extra={d: !!timestamp 2020-01-01}", ["--set extra", "not a plain YAML value", "timestamp"]),
    ("extra={s: !!set {x: null}}", ["--set extra", "not a plain YAML value", "set"]),
]


@pytest.mark.parametrize("item,words", WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_set_value_is_one_sentence_and_exit_2_with_nothing_started(tmp_path, capsys, item, words):
    store = tmp_path / "store"
    status = cli.main(["run", "--data", str(tmp_path / "none.csv"), "--store", str(store), "--set", item])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and err.startswith("xai-ray: "), err
    for word in words:
        assert word in err, (word, err)
    assert not store.exists()  # refused before the store, the log or Ray


@pytest.mark.parametrize("item,words", WRONG[:7], ids=[w[0] for w in WRONG[:7]])
def test_the_same_values_are_refused_from_a_yaml_file(tmp_path, item, words):
    key, value = item.split("=", 1)
    path = tmp_path / "run.yaml"
    path.write_text(f"{key}: {value}\n")
    with pytest.raises(ConfigError) as err:
        resolve(path)
    assert all(word in str(err.value) for word in words), str(err.value)


def test_config_given_settings_instead_of_a_path_is_one_sentence():
    with pytest.raises(ConfigError, match="config takes a YAML file's path, got a dict; give settings as keywords"):
        resolve({"limit": 2})  # xai_ray.run(..., config={"limit": 2}): a TypeError of os.fspath


@pytest.mark.parametrize("text", ["1: 2", "null: 2", "true: 1"])
def test_a_config_file_key_that_is_not_text_is_an_unknown_key(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(text + "\n")  # the "did you mean" lookup took the number, null or bool as text
    for read in (lambda: resolve(path), lambda: finetune_settings.resolve(path, {"out": "x"}, [])):
        with pytest.raises(ConfigError, match="unknown (config|finetune) key"):
            read()


@pytest.mark.parametrize(
    "item,expected",
    [
        ("trust_remote_code=false", False),
        ("trust_remote_code=true", True),
        ("max_tokens_per_batch=1e4", 10000),  # YAML 1.1 reads 1e4 as text: the number it spells
        ("discard_ratio=1e-1", 0.1),
        ("batch_size=8", 8),
        ("gpus_per_actor=1", 1.0),
        ("limit=null", None),
        ("evaluate_fractions=0.1,0.5", (0.1, 0.5)),
        ("methods=[raw, flow]", ("raw", "flow")),
        ("extra={1: a, b: {2: c}}", {"1": "a", "b": {"2": "c"}}),  # keys as JSON writes them: the manifest sorts them
        ("seed=010", 10),  # YAML 1.1 read 010 as octal 8
        ("run_id=123", "123"),  # a text key takes a whole number's digits, as --run-id 123 does
        ("run_id=0123", "0123"),  # was 83, then refused as an integer
        ("data=2026-01-01", "2026-01-01"),  # a date stays text
    ],
)
def test_right_values_are_taken_as_their_declared_type(item, expected):
    key = item.split("=", 1)[0]
    value = getattr(resolve(sets=[item]), key)
    assert value == expected and type(value) is type(expected)


def test_every_ranged_key_is_a_field_and_help_config_prints_its_type_and_range():
    names = {f.name for f in fields(RunConfig)}
    assert set(RULES) <= names
    text = RunConfig.__module__ and __import__("xai_ray.config_help", fromlist=["help_config"]).help_config()
    assert "type: true or false" in text
    assert "accepted: one of half, none" in text  # the retired residual=add is not offered
    assert "add (W + I" not in text
    assert "accepted: in [0, 1)" in text  # discard_ratio


def test_finetune_keys_are_typed_too():
    with pytest.raises(ConfigError, match="trust_remote_code must be true or false"):
        finetune_settings.resolve(None, {"out": "x"}, ['trust_remote_code="false"'])
    with pytest.raises(ConfigError, match="epochs must be an integer"):
        finetune_settings.resolve(None, {"out": "x"}, ["epochs=1.5"])
    assert finetune_settings.resolve(None, {"out": "x"}, ["lr=2e-4"]).lr == 2e-4  # YAML 1.1's text "2e-4"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("argv", [["--help"], *[[name, "--help"] for name in _commands()]], ids=" ".join)
def test_every_help_page_prints(capsys, argv):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: xai-ray") and len(out.splitlines()) > 3


@pytest.mark.parametrize(
    "argv,words",
    [
        (["topk", "--k", "-1"], ["--k", "between 1 and 100000"]),
        (["topk", "--layer", "0"], ["--layer", "at least 1"]),
        (["report", "--out", "r.html", "--k", "-5"], ["--k", "between 1 and 1000"]),
        (["explain", "hi", "--model", "m", "--out", "o.html", "--max-length", "0"], ["--max-length", "between 3"]),
        (["topk", "--store", ""], ["--store", "must not be empty"]),
        (["sql", "--store", " ", "select 1"], ["--store", "must not be empty"]),
    ],
)
def test_out_of_range_flags_are_refused_by_the_parser(capsys, argv, words):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert all(word in err for word in words), err


@pytest.mark.parametrize("what", ["model", "data"])
def test_a_run_refused_before_scoring_leaves_no_store_or_log_behind(tmp_path, capsys, tiny_model_dir, what):
    corpus = tmp_path / "reviews.csv"
    corpus.write_text("id,text,label\n1,good film,1\n")
    given = {"model": tiny_model_dir, "data": str(corpus)}
    given[what] = str(tmp_path / "missing")  # a model folder or a corpus that is not there
    store = tmp_path / "new" / "store"
    status = cli.main(["run", "--data", given["data"], "--model", given["model"], "--store", str(store)])
    err = capsys.readouterr().err
    assert status == 2 and "missing" in err, err
    assert not (tmp_path / "new").exists()  # the folders the run made for its log are gone again


def test_a_refused_run_keeps_a_store_that_was_there(tmp_path, capsys, tiny_model_dir):
    store = tmp_path / "store"
    (store / "logs").mkdir(parents=True)
    (store / "logs" / "earlier.log").write_text("an earlier run's log\n")
    status = cli.main(["run", "--data", str(tmp_path / "none.csv"), "--model", tiny_model_dir, "--store", str(store)])
    assert status == 2
    assert sorted(p.name for p in store.rglob("*")) == ["earlier.log", "logs"]


def test_a_start_layer_past_the_models_last_layer_is_refused_before_anything_is_scored(tmp_path, capsys, tiny_bert_dir):
    data = tmp_path / "reviews.csv"
    data.write_text("id,text,label\na,a good film,1\n")
    store = tmp_path / "store"
    status = cli.main(
        ["run", "--data", str(data), "--model", tiny_bert_dir, "--store", str(store), "--set", "start_layer=3"]
    )
    err = capsys.readouterr().err.strip()
    assert status == 2 and err == "xai-ray: start_layer is 3 but the model has 2 layers: give a layer from 1 to 2"
    assert not (store / "runs").exists()


def test_a_yaml_alias_bomb_in_a_config_file_is_refused_at_once(tmp_path):
    """A 409-byte config of nested aliases drove `run` to 9.4 GB before any check; one naming itself
    raised a RecursionError's traceback. Aliases are refused where the file is read, with the line."""
    rows = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    rows += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("extra:\n" + "\n".join("  " + row for row in rows) + "\n")
    selfish = tmp_path / "self.yaml"
    selfish.write_text("extra: &a {x: *a}\n")
    for path, line in ((bomb, 3), (selfish, 1)):
        with pytest.raises(ConfigError, match=rf"alias \*a\d? is not allowed.*line {line}"):
            resolve(path)


def test_a_key_given_twice_in_a_config_file_is_refused_with_both_lines(tmp_path):
    """PyYAML keeps the last of two equal keys without a word: `limit: 4` then `limit: 5` ran 5."""
    path = tmp_path / "twice.yaml"
    path.write_text("limit: 4\nmodel: minilm\nlimit: 5\n")
    with pytest.raises(ConfigError, match=re.escape("the key 'limit' is given twice (first on line 1) (line 3")):
        resolve(path)
    path.write_text("extra:\n  a: 1\n  a: 2\n")  # inside a nested mapping too
    with pytest.raises(ConfigError, match=re.escape("the key 'a' is given twice (first on line 2)")):
        resolve(path)
    path.write_text("limit: 4\nextra: {a: [1, 1], b: {a: 1}}\n")  # equal values and keys in other mappings: fine
    assert resolve(path).extra == {"a": [1, 1], "b": {"a": 1}}


def test_a_report_definition_is_read_as_plainly_as_a_config(tmp_path):
    """`report --definition` with a YAML tag, an unclosed list or a non-UTF-8 byte gave tracebacks;
    `k: true` and `k: 1000000000` were taken (--k stops at 1000)."""
    from xai_ray.report.definition import load_definition

    cases = {
        "k: !!python/name:os.system\n": "is not allowed",
        "k: [1\n": "is not valid YAML",
        "k: &a 5\nmin_count: *a\n": "the alias *a is not allowed",
        "k: true\n": "k must be a whole number in [1, 1000]",
        "k: 1000000000\n": "k must be a whole number in [1, 1000]",
    }
    for text, words in cases.items():
        path = tmp_path / "definition.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(words)):
            load_definition(path)
    path.write_bytes(b"k: 5\n\xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_definition(path)
    path.write_text("k: 30\n")
    assert load_definition(path)["k"] == 30


def test_a_tilde_in_a_path_key_is_the_home_folder_wherever_it_came_from(tmp_path, monkeypatch):
    """`store: ~/s` in YAML or --set reaches no shell: staging went to ./~/s, the empty tables to
    the home folder (pyarrow expands it), and the run died after scoring."""
    import os

    from xai_ray.config import resolve

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "c.yaml").write_text("store: ~/from-yaml\ndata: ~/d.csv\n")
    cfg = resolve(tmp_path / "c.yaml", None, ["model=~/m"])
    assert (cfg.store, cfg.data, cfg.model) == tuple(
        os.path.join(str(tmp_path), n) for n in ("from-yaml", "d.csv", "m")
    )
    assert resolve(None, None, ["store=~/from-set"]).store == str(tmp_path / "from-set")
    assert resolve(None, None, ["store=s3://b/~x"]).store == "s3://b/~x"  # a URI is left as it is


def test_a_resume_takes_its_runs_settings_and_nothing_that_would_move_it(tmp_path, capsys):
    """--config was dropped without a word, and --set run_id started a new run beside the
    unfinished one (which stayed unfinished)."""
    from xai_ray import cli
    from xai_ray.config import ConfigError
    from xai_ray.pipeline import resume_config
    from xai_ray.store import layout

    staged = layout.staged_config(tmp_path, "r")
    staged.parent.mkdir(parents=True)
    staged.write_text("model: minilm\n")
    for sets in (["run_id=other"], ["store=/elsewhere"]):
        with pytest.raises(ConfigError, match=f"--set {sets[0].split('=')[0]} cannot move it"):
            resume_config(str(tmp_path), "r", None, sets)
    assert resume_config(str(tmp_path), "r", None, ["batch_size=4"]).run_id == "r"
    (tmp_path / "y.yaml").write_text("methods: [raw]\n")
    for extra in (["--config", str(tmp_path / "y.yaml")], ["--run-id", "other"]):
        assert cli.main(["run", "--resume", "r", "--store", str(tmp_path), *extra]) == 2
        assert "--config and another --run-id cannot be given with it" in capsys.readouterr().err


def test_local_paths_are_made_absolute_and_names_are_not(tmp_path, monkeypatch):
    """Ray's workers read a relative path in Ray's folder, not the notebook's current one: a run
    makes the corpus and model paths that name something here absolute; Hub ids, URIs and the
    packaged model's name stay as given. A staging kept by an older version (the path as typed)
    still resumes from the folder it was typed in."""
    from xai_ray.config import RunConfig, absolute_paths, local_path
    from xai_ray.store.staging import _same_setting

    (tmp_path / "m").mkdir()
    (tmp_path / "c.csv").write_text("id,text\n")
    (tmp_path / "minilm").mkdir()  # a folder named like the packaged model does not shadow it
    monkeypatch.chdir(tmp_path)
    cfg = absolute_paths(RunConfig(data="c.csv", model="m"))
    assert (cfg.data, cfg.model) == (str(tmp_path / "c.csv"), str(tmp_path / "m"))
    assert absolute_paths(RunConfig(data="imdb", model="minilm")).model == "minilm"
    assert local_path("imdb") == "imdb" and local_path("s3://bucket/c.csv") == "s3://bucket/c.csv"
    assert local_path("bert-base-uncased") == "bert-base-uncased"
    assert _same_setting("data", "c.csv", str(tmp_path / "c.csv"))
    assert not _same_setting("data", "other.csv", str(tmp_path / "c.csv"))
    assert not _same_setting("max_length", "128", 128)


def test_numpy_values_and_nulls_from_a_notebook():
    """A notebook's numbers are often numpy's (``len(frame)``, a column's max): ``np.int64(10)`` was
    refused as no integer. A key given as None was left out, leaving its default: ``label_column=None``
    read the ``label`` column; it now names no column (an unlabelled run, as ``--set label_column=none``)."""
    from dataclasses import replace

    import numpy as np

    from xai_ray.api import _with_nulls
    from xai_ray.config import ConfigError, RunConfig

    cfg = replace(RunConfig(), limit=np.int64(10), heads=np.bool_(False), max_length=np.int32(64))
    assert (cfg.limit, cfg.heads, cfg.max_length) == (10, False, 64) and type(cfg.limit) is int
    with pytest.raises(ConfigError, match="limit must be an integer or null, got 1.5"):
        replace(RunConfig(), limit=np.float64(1.5))
    nulls = _with_nulls(RunConfig(limit=5), {"label_column": None, "id_column": None, "limit": None})
    assert (nulls.label_column, nulls.id_column, nulls.limit) == ("none", "none", None)
    with pytest.raises(ConfigError, match="max_length needs a value"):
        _with_nulls(RunConfig(), {"max_length": None})
    with pytest.raises(ConfigError, match="unknown config key 'limt' in the keywords of xai_ray.run"):
        _with_nulls(RunConfig(), {"limt": None})
