"""Corpus in: sources (Hub id, Parquet, CSV, JSONL, aclImdb) -> rows ``{doc_id, text, label}`` with ids and
labels kept as written (``fields``), then screening (``screening``): bad rows and duplicate ids to ``errors``.
"""
