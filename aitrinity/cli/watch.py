"""``trinity watch URL``: a live vLLM server's binding resource each period (``aitrinity.systems.vllm.watch``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aitrinity.cli.args import count
from aitrinity.errors import SpecError

if TYPE_CHECKING:
    from aitrinity.spec.hardware import Dtype
    from aitrinity.spec.model import ModelSpec
    from aitrinity.systems.vllm.priced import Served
    from aitrinity.systems.vllm.watch import Sample

HELP = """examples:
  trinity watch http://127.0.0.1:8000 --device me.yaml          the model's config is read from the server's model path
  trinity watch http://127.0.0.1:8000 --model-config config.json --device h100-sxm --period 10 --json
  trinity watch http://127.0.0.1:8000 --device me.yaml --kv-engine-id ID   also the aitrinity KV connector's tiers
  trinity watch http://127.0.0.1:8000 --device h100-sxm --tp 4          a server started with --tensor-parallel-size 4

Each period: running and waiting requests, KV-cache usage, preemptions, token rates, the binding resource
(KV capacity, queue, KV tier, compute, memory bandwidth, idle) and the exchange that would relieve it. With a
model and a device, the requests that finished in the period are priced as `trinity diagnose` prices a serving
scenario (their mean prompt and output lengths, the clients in flight by Little's law, the server's own KV pool
from /metrics): measured TTFT and TPOT beside the priced ones, and the advice of a Controller that predicts each
one-step exchange (KV or weight quantization) at that load and switches its pick only when it pays
for two periods running. With --kv-engine-id (the kv_transfer_config's engine_id of a server running aitrinity's
KV connector) also the tokens each tier loaded, its read bandwidth and the share of the period spent reading it.
--json prints one object per period (a line each). Ctrl-C stops.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "watch",
        help="which resource binds a live vLLM server, period by period",
        description="Read a vLLM server's Prometheus /metrics each period and say what binds it.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--model-config", metavar="FILE", help="the served model's config.json (default: from /v1/models)")
    p.add_argument("--device", help="catalog device or a trinity calibrate profile the server runs on")
    p.add_argument(
        "--tp", type=count(1, 4096), default=1, help="the server's tensor-parallel size (default 1; /metrics lacks it)"
    )
    p.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp32"),
        help="the server's --dtype (default: the config's torch_dtype, else bf16)",
    )
    p.add_argument("--period", type=float, default=5.0, help="seconds between reads (default 5)")
    p.add_argument("--count", type=count(1, 10**9), help="stop after this many periods (default: until Ctrl-C)")
    p.add_argument("--json", action="store_true", help="one JSON object per period")
    p.add_argument(
        "--kv-engine-id",
        metavar="ID",
        help="the engine_id of the server's aitrinity KV connector: read its tiers over the worker's lookup socket",
    )


def _get(url: str, path: str) -> bytes:
    import http.client  # here, not at the top: it pulls in ssl, which every other command would pay for at start-up

    try:  # urllib: ValueError on a malformed host ("http://[::1") or port (":99999"); http.client: InvalidURL ("a b")
        u = urllib.parse.urlsplit(url)
        host, port = u.hostname, u.port or 80
        if u.scheme != "http" or not host:
            raise ValueError("not http://HOST[:PORT]")
        c = http.client.HTTPConnection(host, port, timeout=10)
    except (ValueError, http.client.InvalidURL) as e:
        raise SpecError("URL", url, f"an http:// URL of a vLLM server ({e})") from None
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise SpecError("URL", url, f"a vLLM server (GET {path} answered HTTP {r.status})")
        return body
    except http.client.HTTPException as e:  # something answered, but not in HTTP
        raise SpecError("URL", url, f"a vLLM server (GET {path}: {type(e).__name__})") from None
    except OSError as e:
        raise SpecError("URL", url, f"a reachable vLLM server ({e})") from e
    finally:
        c.close()


def _model_config(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str]:
    if args.model_config:
        path = Path(args.model_config)
    else:
        models = json.loads(_get(args.url, "/v1/models"))["data"]
        path = Path(models[0]["id"]) / "config.json"
        if not path.is_file():
            return None, f"no local config for {models[0]['id']} (give --model-config)"
    try:
        return json.loads(path.read_text()), str(path)
    except (OSError, ValueError) as e:
        raise SpecError("--model-config", str(path), f"a readable config.json ({e})") from e


def _reader(args: argparse.Namespace) -> Callable[[], Any]:
    """One read of the server's counters, with the KV connector's when ``--kv-engine-id`` names it."""
    from aitrinity.systems.vllm import watch

    def metrics() -> Any:
        return watch.parse_metrics(_get(args.url, "/metrics").decode(), time.monotonic())

    if not args.kv_engine_id:
        return metrics
    import logging

    from aitrinity.systems.vllm.lookup import LookupClient, socket_path

    logging.getLogger("aitrinity.systems.vllm.lookup").setLevel(logging.ERROR)  # an unreachable socket is our error
    client = LookupClient(socket_path(args.kv_engine_id))
    hello = client.hello()
    if hello is None:
        raise SpecError(
            "--kv-engine-id",
            args.kv_engine_id,
            f"the engine_id of a running aitrinity KV connector (its socket {socket_path(args.kv_engine_id)}: "
            f"{client.last_error})",
        )

    def both() -> Any:
        sample = metrics()
        stats = client.stats()
        if stats is None:
            raise SpecError("--kv-engine-id", args.kv_engine_id, f"a connector that answers ({client.last_error})")
        return watch.with_tiers(sample, stats, hello)

    return both


DTYPES: dict[str, Dtype] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
"""A config's ``torch_dtype`` (``dtype`` since transformers 4.56) as the pricer names it."""


def _served(args: argparse.Namespace, m: ModelSpec, cfg: dict[str, Any], first: Sample) -> Served:
    """What the server runs, for the pricer: its dtype (``--dtype``, else the config's), its KV pool from the first
    read, the measured kernel tables where the device has them under vLLM."""
    from aitrinity import silicon
    from aitrinity.systems.vllm import priced

    dtype: Dtype = args.dtype or DTYPES.get(str(cfg.get("torch_dtype") or cfg.get("dtype")), "bf16")
    s = priced.served(m, args.device, args.tp, dtype, kv_pool_tokens=first.kv_pool_tokens, engines=first.engines)
    choice = silicon.kernels(s.system.device, "vllm", fp8_block=bool(m.fp8_weight_block))
    return dataclasses.replace(s, kernels=choice.kernels)


def run(args: argparse.Namespace) -> int:
    from aitrinity import catalog
    from aitrinity.catalog.hf import from_hf_config
    from aitrinity.systems.vllm import priced, watch

    if not args.period > 0:
        raise SpecError("--period", args.period, "a positive number of seconds")
    for flag, given in (("--tp", args.tp != 1), ("--dtype", args.dtype is not None)):
        if given and not args.device:
            raise SpecError(flag, getattr(args, flag[2:]), "given with --device (nothing is priced without a device)")
    cfg, where = _model_config(args)
    m = from_hf_config(cfg, Path(where).parent.name, where=where) if cfg is not None else None
    if args.device:
        catalog.device(args.device)  # a bad --device is said before anything else
    read = _reader(args)  # and a bad --kv-engine-id
    prev = read()
    served = _served(args, m, cfg, prev) if m is not None and cfg is not None and args.device else None
    advisor = priced.Advisor.of(served) if served is not None else None
    odd = priced.overcommitted(served) if served is not None else None
    if odd:
        print(f"trinity watch: warning: {odd}", file=sys.stderr)
    if not args.quiet:
        said = f"model {m.name} ({where})" if m else where
        dev = served.system.device.name if served else (args.device or "not given")
        pool = f"; KV pool {prev.kv_pool_tokens:,} tokens" if prev.kv_pool_tokens else ""
        print(f"watching {args.url}: {said}; device {dev}{pool}", file=sys.stderr)
    n, last = 0, None
    while args.count is None or n < args.count:
        time.sleep(args.period)
        now = read()
        v = watch.judge(prev, now, served, last)
        if advisor is not None and v.load is not None:
            v = dataclasses.replace(v, advice=advisor.advise(v.load))
        print(json.dumps(v.to_json()) if args.json else watch.line(v), flush=True)
        prev, last, n = now, v.load or last, n + 1
    return 0
