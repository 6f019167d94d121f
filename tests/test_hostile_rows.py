"""Hostile rows (issue 29): a row that cannot be read or decoded is an ``errors`` row with its
reason and the job goes on; an actor no node of the cluster can hold is refused at once.

Readers are tested without Ray (``read_corpus`` reads the same pieces the workers read), generated
as bad bytes x formats and bad values x formats; a few runs go through a real local Ray cluster.
Model folders and config files: ``test_hostile_files.py``.
"""

from __future__ import annotations

import io
import tarfile
import time

import pytest

from xai_ray import cli
from xai_ray.data.corpus import read_corpus
from xai_ray.data.screening import screen

GOOD = [("1", b"the film was good", 1), ("2", b"a bad plot", 0)]
FORMATS = ("csv", "jsonl", "json", "aclimdb", "tar")
BAD_BYTES = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82", b"\xc0\xaf", b"\x80\x80")


def write_corpus(kind: str, folder, rows) -> tuple[str, dict]:
    """``rows`` (id, text bytes, label) as a corpus of ``kind``; returns (source, {id: stored doc_id})."""
    if kind in ("aclimdb", "tar"):
        names = {i: f"train/{'pos' if label else 'neg'}/{i}_{7 if label else 2}.txt" for i, _, label in rows}
        ids = {i: f"train_{'pos' if label else 'neg'}_{i}" for i, _, label in rows}
        if kind == "aclimdb":
            for i, text, _ in rows:
                path = folder / "aclImdb" / names[i]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(text)
            return str(folder / "aclImdb"), ids
        source = folder / "reviews.tar.gz"
        with tarfile.open(source, "w:gz") as archive:
            for i, text, _ in rows:
                member = tarfile.TarInfo(f"aclImdb/{names[i]}")
                member.size = len(text)
                archive.addfile(member, io.BytesIO(text))
        return str(source), ids
    source = folder / f"corpus.{kind}"
    if kind == "csv":
        lines = [b"id,text,label\n"] + [b'%s,"%s",%d\n' % (i.encode(), text, label) for i, text, label in rows]
    else:
        lines = [b'{"id": "%s", "text": "%s", "label": %d}' % (i.encode(), text, label) for i, text, label in rows]
        lines = [line + b"\n" for line in lines] if kind == "jsonl" else [b"[" + b",\n".join(lines) + b"]"]
    source.write_bytes(b"".join(lines))
    return str(source), {i: i for i, _, _ in rows}


def read_and_screen(source: str):
    corpus = read_corpus(source, split="train")
    kept, rejected = screen(corpus, [0, 1])
    assert len(corpus) == len(kept) + len(rejected)  # rows in = docs + errors
    return kept, dict(zip(rejected.doc_id, rejected.reason))


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("bad", BAD_BYTES, ids=lambda b: b.hex())
def test_invalid_utf8_is_an_errors_row_naming_the_byte_its_offset_and_the_file(tmp_path, kind, bad):
    source, ids = write_corpus(kind, tmp_path, [*GOOD, ("3", b"bad " + bad + b" film", 0)])
    kept, reasons = read_and_screen(source)
    assert sorted(kept.doc_id) == sorted([ids["1"], ids["2"]])
    assert sorted(kept.text) == ["a bad plot", "the film was good"]  # the other rows exactly as written
    reason = reasons[ids["3"]]
    assert reason.startswith(f"text is not valid UTF-8: byte 0x{bad[0]:02x} at byte 4 of "), reason
    where = {
        "csv": f"the text on line 4 of {source!r}",
        "jsonl": f"the text on line 3 of {source!r}",
        "json": f"the text of element 2 of {source!r}",
        "aclimdb": repr(f"{source}/train/neg/3_2.txt"),
        "tar": f"'aclImdb/train/neg/3_2.txt' in {source!r}",
    }[kind]
    assert reason.endswith(f"of {where}; fix the file's encoding"), reason


SURROGATES = {
    "text": (
        b'{"id": "s", "text": "bad \\ud800 film", "label": 0}',
        "s",
        "text is not valid Unicode: a lone surrogate U+D800",
    ),
    "low": (
        b'{"id": "s", "text": "bad \\udfff", "label": 0}',
        "s",
        "text is not valid Unicode: a lone surrogate U+DFFF",
    ),
    "reversed": (b'{"id": "s", "text": "x \\udc00\\ud800", "label": 0}', "s", "lone surrogate U+DC00 (half of"),
    "id": (b'{"id": "s\\ud800", "text": "fine", "label": 0}', "s\\ud800", "doc_id is not valid Unicode"),
    "label": (b'{"id": "s", "text": "fine", "label": "\\ud800"}', "s", "is not a class number"),
    "key": (b'{"id": "s", "text": "fine", "label": 0, "\\ud800": "\\udfff"}', None, None),
}


@pytest.mark.parametrize("kind", ["jsonl", "json"])
@pytest.mark.parametrize("case", SURROGATES)
def test_a_lone_surrogate_is_an_errors_row_and_a_real_pair_is_kept(tmp_path, kind, case):
    line, doc_id, expected = SURROGATES[case]
    pair = b'{"id": "emoji", "text": "good \\ud83d\\ude00 film", "label": 1}'
    lines = [pair, line]
    source = tmp_path / f"c.{kind}"
    source.write_bytes(b"\n".join(lines) + b"\n" if kind == "jsonl" else b"[" + b",".join(lines) + b"]")
    kept, reasons = read_and_screen(str(source))
    assert kept.text.iloc[0] == "good \U0001f600 film"
    if expected is None:  # a key the job never reads holds it: the row is fine
        assert kept.doc_id.tolist() == ["emoji", "s"] and not reasons
    else:
        assert kept.doc_id.tolist() == ["emoji"] and expected in reasons[doc_id], reasons


def test_a_csv_row_with_more_fields_than_its_header_is_an_errors_row(tmp_path):
    source = tmp_path / "c.csv"
    source.write_bytes(
        b"id,text,label\n"
        b"a,good film,1\n"
        b"b,too,many,fields,0\n"
        b'c,"a quoted\nreview, over two lines",0\n'
        b"\n"
        b"d,short\n"  # a missing label: unlabelled, as before
        b"e,bad,1,2\n"
    )
    kept, reasons = read_and_screen(str(source))
    assert kept.doc_id.tolist() == ["a", "c", "d"]
    assert kept.text.tolist()[1] == "a quoted\nreview, over two lines" and kept.label.isna().tolist()[2]
    assert reasons == {"line-3": "line 3 has 5 fields, the header 3", "line-8": "line 8 has 4 fields, the header 3"}


def test_a_folder_named_like_a_review_is_an_errors_row(tmp_path):
    source, ids = write_corpus("aclimdb", tmp_path, GOOD)
    (tmp_path / "aclImdb" / "train" / "pos" / "9_10.txt").mkdir()
    kept, reasons = read_and_screen(source)
    assert sorted(kept.doc_id) == sorted(ids.values())
    assert reasons == {"train_pos_9": f"{source + '/train/pos/9_10.txt'!r} is a folder, not a review file"}


# ---------------------------------------------------------------------------- through Ray


def _run(tmp_path, source, tiny_bert_dir, capsys, *extra):
    store = tmp_path / "store"
    argv = ["run", "--data", str(source), "--model", tiny_bert_dir, "--store", str(store), "--run-id", "r"]
    status = cli.main([*argv, "--actors", "1", "--max-length", "32", "--no-report", *extra])
    return status, capsys.readouterr().err, store


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_hostile_rows_run_to_the_end_on_ray_workers(ray_cluster, tmp_path, tiny_bert_dir, capsys, kind):
    from xai_ray.query.connection import open_store

    if kind == "jsonl":
        raw = (
            b'{"id": "ok", "text": "the film was good", "label": 1}\n'
            b'{"id": "sur", "text": "bad \\ud800 film", "label": 0}\n'
            b'{"id": "id\\udfff", "text": "fine", "label": 0}\n'
            b'{"id": "bytes", "text": "bad \xff film", "label": 0}\n'
        )
        expected = {"sur": "not valid Unicode", "id\\udfff": "not valid Unicode", "bytes": "byte 0xff at byte 4"}
    else:
        raw = b'id,text,label\nok,the film was good,1\nmany,a,b,c,0\nbytes,"bad \xfe film",0\n'
        expected = {"line-3": "line 3 has 5 fields, the header 3", "bytes": "byte 0xfe at byte 4"}
    source = tmp_path / f"hostile.{kind}"
    source.write_bytes(raw)
    status, err, store = _run(tmp_path, source, tiny_bert_dir, capsys)
    assert status == 0, err
    con = open_store(store)
    docs = con.execute("select doc_id from docs").df()
    errors = con.execute("select doc_id, stage, reason from errors").df()
    assert docs.doc_id.tolist() == ["ok"] and set(errors.stage) == {"read"}
    reasons = dict(zip(errors.doc_id, errors.reason))
    assert sorted(reasons) == sorted(expected) and all(expected[k] in reasons[k] for k in expected), reasons


@pytest.mark.slow
@pytest.mark.ray
def test_an_actor_no_node_can_hold_is_refused_in_seconds(ray_cluster, tmp_path, tiny_bert_dir, capsys):
    source = tmp_path / "c.jsonl"
    source.write_text('{"id": "a", "text": "the film was good", "label": 1}\n')
    resources = ray_cluster.cluster_resources()
    gpus, cpus = resources.get("GPU", 0) + 1, resources["CPU"]
    for extra, asked in (
        (["--gpus-per-actor", f"{gpus:g}"], f"of 1 CPU and {gpus:g} GPU"),
        (["--gpus-per-actor", "0", "--set", f"cpus_per_actor={cpus + 1:g}"], f"of {cpus + 1:g} CPU and 0 GPU"),
    ):
        started = time.monotonic()
        status, err, store = _run(tmp_path, source, tiny_bert_dir, capsys, *extra)
        assert time.monotonic() - started < 60  # the cluster is up: refused at once, never left waiting
        assert status == 2 and len(err.splitlines()) == 1, err
        assert f"no node of the Ray cluster can hold a scoring actor {asked}" in err
        assert f"(the cluster has 1 node of {cpus:g} CPU and {gpus - 1:g} GPU)" in err
        assert not (store / "runs").exists() and not (store / "_staging").exists()


@pytest.mark.slow
@pytest.mark.ray
def test_a_piece_a_worker_cannot_read_is_its_own_sentence(ray_cluster, tmp_path, tiny_bert_dir, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "c.parquet"
    table = pa.table({"id": [str(i) for i in range(40)], "text": ["a good film"] * 40, "label": [1, 0] * 20})
    pq.write_table(table, source, row_group_size=20, compression="none")
    # the second row group's first page header overwritten: the footer (read on the driver) is intact
    offset = pq.ParquetFile(source).metadata.row_group(1).column(0).data_page_offset
    data = bytearray(source.read_bytes())
    data[offset : offset + 16] = b"\xff" * 16
    source.write_bytes(bytes(data))
    status, err, _ = _run(tmp_path, source, tiny_bert_dir, capsys)
    # Ray Data logs the task's failure above it (its console shows errors); ours is the last line
    last = err.splitlines()[-1]
    assert status == 2 and last.startswith(f"xai-ray: Parquet file {str(source)!r} cannot be read: "), err
    assert "ray::" not in last and "\x1b[" not in last
