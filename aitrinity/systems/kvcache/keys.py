"""Block keys: prefix-chained BLAKE2b hashes of full token blocks, salted per tenant / model.

``key[0] = H(root, tokens[0:B])``, ``key[i] = H(key[i-1], tokens[iB:(i+1)B])``:
a block's key names its tokens *and* everything before them, so equal keys
mean reusable KV (vLLM automatic prefix caching; Mooncake FAST'25 §3). Only
full blocks get keys. ``root`` hashes the salt and the extra keys (adapter
id, KV dtype, layout, ...) as canonical JSON, so two tenants, models or
layouts never share a key. Tokens are hashed as little-endian uint32 bytes;
nothing depends on Python's ``hash`` or ``PYTHONHASHSEED``.

Each block also gets a ``content`` id: the same chain with an empty salt,
which the store uses only to explain a miss as a salt mismatch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

KEY_BYTES = 16
DEFAULT_BLOCK_TOKENS = 256


def _root(salt: str, extra: Mapping[str, str | int | float | bool]) -> bytes:
    canon = json.dumps({"salt": salt, "extra": dict(extra)}, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(canon.encode("utf-8"), digest_size=KEY_BYTES, person=b"aitrinity-root").digest()


def _chain(root: bytes, tokens: Sequence[int], block: int) -> list[bytes]:
    arr = np.asarray(tokens, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
        raise ValueError("token ids must be in [0, 2**32)")
    raw = arr.astype("<u4").tobytes()
    step = 4 * block
    out, prev = [], root
    for i in range(len(arr) // block):
        prev = hashlib.blake2b(prev + raw[i * step : (i + 1) * step], digest_size=KEY_BYTES).digest()
        out.append(prev)
    return out


@dataclass(frozen=True)
class BlockKeys:
    keys: list[bytes]
    content: list[bytes]
    block_tokens: int


@dataclass(frozen=True)
class Keyer:
    """Keys for one tenant / model / layout: ``Keyer("tenant-a", {"model": "llama", "dtype": "fp32"})``."""

    salt: str = ""
    extra: tuple[tuple[str, str | int | float | bool], ...] = ()
    block_tokens: int = DEFAULT_BLOCK_TOKENS

    def __post_init__(self) -> None:
        if self.block_tokens <= 0:
            raise ValueError("block_tokens must be positive")

    @classmethod
    def of(cls, salt: str = "", block_tokens: int = DEFAULT_BLOCK_TOKENS, **extra: str | int | float | bool) -> Keyer:
        return cls(salt, tuple(sorted(extra.items())), block_tokens)

    @property
    def root(self) -> bytes:
        return _root(self.salt, dict(self.extra))

    @property
    def namespace(self) -> str:
        """A short name for this salt (Redis key prefix, disk subfolder)."""
        return self.root.hex()[:16]

    def keys(self, tokens: Sequence[int]) -> BlockKeys:
        return BlockKeys(
            _chain(self.root, tokens, self.block_tokens),
            _chain(_root("", {}), tokens, self.block_tokens),
            self.block_tokens,
        )
