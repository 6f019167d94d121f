"""BERT, RoBERTa and DistilBERT sequence classifiers in plain torch, for inference in the actors.

Importing transformers' model classes costs a scoring actor more than its weights do: about 2 s
of CPU on this project's 2-core machine, and 8-10 s per actor on a GPU machine's first start
(bench/README.md, "where a GPU actor's start goes"). The modules here rebuild those three
classifiers with transformers' module tree and parameter names, so that:

- a checkpoint's state dict loads as it is, and the fingerprint (every parameter by name) is the
  one transformers' model gives;
- the norm, GlobEnc and relevance methods find the same attributes (``attention.self``,
  ``attention.output.dense``, ``out_lin``, the layer norms, activation modules);
- attention goes through the capture's function (``capture.capture_attention``) exactly as
  transformers' attention interface calls it: the self-attention module, (B, H, n, d) query, key
  and value, the additive mask and the scaling.

Inference only: no dropout, no cache, absolute positions. ``loading.load_model`` decides when a
folder qualifies (``lean.lean_fields``) and loads everything else through transformers. Over 300
lines: three families' classifiers, each module named as transformers names it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from xai_ray.model.capture import capture_attention

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "gelu_pytorch_tanh": lambda: nn.GELU(approximate="tanh")}
ALIASES = {"distilbert": {"hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"}}


class EncoderConfig:
    """config.json's fields as attributes, with transformers' aliases for DistilBERT's names and
    the defaults these classes read; ``id2label`` keyed by int."""

    def __init__(self, fields: dict) -> None:
        self.__dict__.update(fields)
        for alias, name in ALIASES.get(fields.get("model_type"), {}).items():
            setattr(self, alias, fields.get(name))
        labels = fields.get("id2label") or {}
        self.id2label = {int(k): str(v) for k, v in labels.items()}
        self.label2id = {v: k for k, v in self.id2label.items()}
        self.num_labels = len(self.id2label) or int(fields.get("num_labels", 2))
        self.layer_norm_eps = fields.get("layer_norm_eps", 1e-12)
        self.type_vocab_size = fields.get("type_vocab_size", 2)
        self.initializer_range = fields.get("initializer_range", 0.02)
        self.problem_type = fields.get("problem_type")


@dataclass
class Output:
    logits: torch.Tensor  # (B, C)
    attentions: tuple | None = None  # never: attention goes through the capture (``output_attentions`` is ignored)


def additive_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """(B, n) 1/0 mask -> (B, 1, 1, n) added to the scores: 0 at real columns, the dtype's
    minimum at padding (transformers' eager mask, broadcast over query rows)."""
    if attention_mask is None:
        return None
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min  # (B, 1, 1, n)


class Linear(nn.Linear):
    """nn.Linear left uninitialised: the checkpoint fills it (a random draw would be thrown away)."""

    def reset_parameters(self) -> None:
        pass


class Embedding(nn.Embedding):
    """nn.Embedding left uninitialised, as ``Linear``."""

    def reset_parameters(self) -> None:
        pass


def _activation(name: str) -> nn.Module:
    return ACTIVATIONS[name]()


class BertSelfAttention(nn.Module):
    """``attention.self``: the projections; the attention itself is the capture's."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.head_size = c.hidden_size // c.num_attention_heads
        self.scaling = self.head_size**-0.5
        self.query = Linear(c.hidden_size, c.hidden_size)
        self.key = Linear(c.hidden_size, c.hidden_size)
        self.value = Linear(c.hidden_size, c.hidden_size)

    def forward(self, hidden_states: torch.Tensor, attention_mask=None) -> torch.Tensor:
        shape = (*hidden_states.shape[:-1], -1, self.head_size)
        query = self.query(hidden_states).view(shape).transpose(1, 2)  # (B, H, n, d)
        key = self.key(hidden_states).view(shape).transpose(1, 2)  # (B, H, n, d)
        value = self.value(hidden_states).view(shape).transpose(1, 2)  # (B, H, n, d)
        out, _ = capture_attention(self, query, key, value, attention_mask, scaling=self.scaling)  # (B, n, H, d)
        return out.reshape(*hidden_states.shape[:-1], -1)  # (B, n, D)


class DenseNorm(nn.Module):
    """``attention.output`` and ``output``: dense, then the layer norm of it plus the residual."""

    def __init__(self, c: EncoderConfig, width: int) -> None:
        super().__init__()
        self.dense = Linear(width, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(hidden_states) + residual)


class BertAttention(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = DenseNorm(c, c.hidden_size)


class BertIntermediate(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = Linear(c.hidden_size, c.intermediate_size)
        self.intermediate_act_fn = _activation(c.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertLayer(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = DenseNorm(c, c.intermediate_size)

    def forward(self, hidden_states: torch.Tensor, mask) -> torch.Tensor:
        attended = self.attention.output(self.attention.self(hidden_states, mask), hidden_states)  # (B, n, D)
        return self.output(self.intermediate(attended), attended)  # (B, n, D)


class BertEncoder(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(c) for _ in range(c.num_hidden_layers))


class BertEmbeddings(nn.Module):
    """Word + position + token type, then the layer norm. RoBERTa's (``padding_idx`` set) number
    positions from ``padding_idx`` + 1 over real tokens, and from there in order for embeddings
    given directly, as transformers does."""

    def __init__(self, c: EncoderConfig, roberta: bool) -> None:
        super().__init__()
        self.padding_idx = c.pad_token_id if roberta else None
        self.word_embeddings = Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.position_embeddings = Embedding(c.max_position_embeddings, c.hidden_size, padding_idx=self.padding_idx)
        self.token_type_embeddings = Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, input_ids=None, token_type_ids=None, inputs_embeds=None) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, n, D)
        batch, n = inputs_embeds.shape[:2]
        positions = torch.arange(n, device=inputs_embeds.device)[None, :].expand(batch, n)  # (B, n)
        if self.padding_idx is not None and input_ids is not None:
            real = input_ids.ne(self.padding_idx).int()  # (B, n)
            positions = (torch.cumsum(real, dim=1).type_as(real) * real).long() + self.padding_idx  # (B, n)
        elif self.padding_idx is not None:
            positions = positions + self.padding_idx + 1
        if token_type_ids is None:
            token_type_ids = torch.zeros(batch, n, dtype=torch.long, device=inputs_embeds.device)
        summed = inputs_embeds + self.token_type_embeddings(token_type_ids) + self.position_embeddings(positions)
        return self.LayerNorm(summed)  # (B, n, D)


class BertPooler(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = Linear(c.hidden_size, c.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))  # (B, D)


class BertModel(nn.Module):
    def __init__(self, c: EncoderConfig, roberta: bool = False) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(c, roberta)
        self.encoder = BertEncoder(c)
        self.pooler = None if roberta else BertPooler(c)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, inputs_embeds=None) -> torch.Tensor:
        hidden = self.embeddings(input_ids, token_type_ids, inputs_embeds)  # (B, n, D)
        mask = additive_mask(attention_mask, hidden.dtype)
        for layer in self.encoder.layer:
            hidden = layer(hidden, mask)
        return hidden  # (B, n, D)


class RobertaClassificationHead(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.dense = Linear(c.hidden_size, c.hidden_size)
        self.out_proj = Linear(c.hidden_size, c.num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.out_proj(torch.tanh(self.dense(hidden_states[:, 0])))  # a function, as in transformers


class DistilBertSelfAttention(nn.Module):
    """``attention``: projections in and out around the capture's attention."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.head_size = c.dim // c.n_heads
        self.scaling = self.head_size**-0.5
        self.q_lin, self.k_lin, self.v_lin, self.out_lin = (Linear(c.dim, c.dim) for _ in range(4))

    def forward(self, hidden_states: torch.Tensor, attention_mask=None) -> torch.Tensor:
        shape = (*hidden_states.shape[:-1], -1, self.head_size)
        query = self.q_lin(hidden_states).view(shape).transpose(1, 2)  # (B, H, n, d)
        key = self.k_lin(hidden_states).view(shape).transpose(1, 2)  # (B, H, n, d)
        value = self.v_lin(hidden_states).view(shape).transpose(1, 2)  # (B, H, n, d)
        out, _ = capture_attention(self, query, key, value, attention_mask, scaling=self.scaling)  # (B, n, H, d)
        return self.out_lin(out.reshape(*hidden_states.shape[:-1], -1))  # (B, n, D)


class DistilBertFFN(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.lin1 = Linear(c.dim, c.hidden_dim)
        self.lin2 = Linear(c.hidden_dim, c.dim)
        self.activation = _activation(c.activation)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.lin2(self.activation(self.lin1(hidden_states)))


class DistilBertBlock(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.attention = DistilBertSelfAttention(c)
        self.sa_layer_norm = nn.LayerNorm(c.dim, eps=1e-12)
        self.ffn = DistilBertFFN(c)
        self.output_layer_norm = nn.LayerNorm(c.dim, eps=1e-12)

    def forward(self, hidden_states: torch.Tensor, mask) -> torch.Tensor:
        attended = self.sa_layer_norm(self.attention(hidden_states, mask) + hidden_states)  # (B, n, D)
        return self.output_layer_norm(self.ffn(attended) + attended)  # (B, n, D)


class DistilBertTransformer(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(DistilBertBlock(c) for _ in range(c.n_layers))


class DistilBertEmbeddings(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.word_embeddings = Embedding(c.vocab_size, c.dim, padding_idx=c.pad_token_id)
        self.position_embeddings = Embedding(c.max_position_embeddings, c.dim)
        self.LayerNorm = nn.LayerNorm(c.dim, eps=1e-12)

    def forward(self, input_ids=None, token_type_ids=None, inputs_embeds=None) -> torch.Tensor:
        if input_ids is not None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, n, D)
        positions = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)[None, :]  # (1, n)
        return self.LayerNorm(inputs_embeds + self.position_embeddings(positions))  # (B, n, D)


class DistilBertModel(nn.Module):
    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.embeddings = DistilBertEmbeddings(c)
        self.transformer = DistilBertTransformer(c)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, inputs_embeds=None) -> torch.Tensor:
        hidden = self.embeddings(input_ids, None, inputs_embeds)  # (B, n, D)
        mask = additive_mask(attention_mask, hidden.dtype)
        for layer in self.transformer.layer:
            hidden = layer(hidden, mask)
        return hidden  # (B, n, D)


class SequenceClassifier(nn.Module):
    """``{model_type}ForSequenceClassification`` with transformers' attribute names: the encoder
    under its ``base_model_prefix`` (``bert``, ``roberta``, ``distilbert``), then the head."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.prefix = config.model_type
        if self.prefix == "distilbert":
            self.distilbert = DistilBertModel(config)
            self.pre_classifier = Linear(config.dim, config.dim)
            self.classifier = Linear(config.dim, config.num_labels)
        elif self.prefix == "roberta":
            self.roberta = BertModel(config, roberta=True)
            self.classifier = RobertaClassificationHead(config)
        else:
            self.bert = BertModel(config)
            self.classifier = Linear(config.hidden_size, config.num_labels)

    @property
    def base_model(self) -> nn.Module:
        return getattr(self, self.prefix)

    @property
    def device(self) -> torch.device:
        return self.classifier.weight.device if self.prefix != "roberta" else self.classifier.out_proj.weight.device

    def train(self, mode: bool = True) -> SequenceClassifier:
        """Inference only (no dropout): training one would silently differ from transformers'."""
        if mode:
            raise RuntimeError("this classifier is for inference; load it with load_model(..., lean=False) to train it")
        return super().train(False)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.word_embeddings

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, inputs_embeds=None, output_attentions=False
    ) -> Output:
        """``output_attentions`` is taken and gives none (the capture has them, as for transformers'
        classes loaded with it); another keyword transformers' classes take (``position_ids``,
        ``labels``...) is refused by Python rather than ignored."""
        hidden = self.base_model(input_ids, attention_mask, token_type_ids, inputs_embeds)  # (B, n, D)
        if self.prefix == "distilbert":
            return Output(self.classifier(torch.relu(self.pre_classifier(hidden[:, 0]))))  # (B, C)
        if self.prefix == "roberta":
            return Output(self.classifier(hidden))  # (B, C)
        return Output(self.classifier(self.bert.pooler(hidden)))  # (B, C)
