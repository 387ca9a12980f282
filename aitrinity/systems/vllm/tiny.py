"""A small local Llama that vLLM serves with nothing downloaded: config, random weights, word-level tokenizer.

The tokenizer maps the words ``w3`` ... ``w{vocab-1}`` to their ids (``<unk>``,
``<s>``, ``</s>`` are 0, 1, 2), so a prompt of N words is exactly N tokens
and a test can build shared prefixes word by word. Weights are seeded; the
folder holds ``config.json``, ``model.safetensors`` and the tokenizer files.
"""

from __future__ import annotations

from pathlib import Path


def words(ids: list[int]) -> str:
    """The prompt text whose tokens are ``ids`` (each in ``[3, vocab)``)."""
    return " ".join(f"w{i}" for i in ids)


def tiny_model(
    path: str | Path,
    *,
    layers: int = 4,
    hidden: int = 512,
    heads: int = 8,
    kv_heads: int = 2,
    intermediate: int = 1376,
    vocab: int = 2048,
    max_positions: int = 4096,
    seed: int = 0,
) -> Path:
    """Write the model folder (bf16 weights) and return its path."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from aitrinity.systems.kvcache.hf import tiny_llama

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab_map = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, vocab)}
    tok = Tokenizer(models.WordLevel(vocab=vocab_map, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    special = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **special)  # type: ignore[no-untyped-call]
    fast.save_pretrained(out)
    model = tiny_llama(
        seed,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        intermediate=intermediate,
        vocab=vocab,
        max_positions=max_positions,
        dtype=torch.bfloat16,
    )
    model.config.bos_token_id, model.config.eos_token_id = 1, 2
    model.save_pretrained(out)
    return out
