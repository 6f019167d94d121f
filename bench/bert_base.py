"""A bert-base-shaped classifier with seeded random weights, for timing the shape the host-cost
benchmarks price highest on a machine with no model hub.

    python bench/bert_base.py OUT [--tokenizer FOLDER] [--layers 12] [--hidden 768]

Writes OUT: 12 layers x 12 heads, hidden 768, intermediate 4 x hidden, 512 positions, two classes
(``BertForSequenceClassification``, ``save_pretrained``), with the tokenizer files of FOLDER (by
default the packaged MiniLM's, whose vocabulary is bert-base-uncased's). Random weights cost what
trained ones cost; their explanations mean nothing.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument(
        "--tokenizer", help="a folder holding a BERT tokenizer's files (default: the packaged MiniLM's)"
    )
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    args = parser.parse_args()

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from xai_ray.model.loading import resolve_model_path

    source = Path(args.tokenizer or resolve_model_path("minilm"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, out / name)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=12,
        intermediate_size=4 * args.hidden,
        max_position_embeddings=512,
        num_labels=2,
    )
    BertForSequenceClassification(config).save_pretrained(out)
    print(f"bert_base: {args.layers} layers x 12 heads, hidden {args.hidden}, random weights -> {out}")


if __name__ == "__main__":
    main()
