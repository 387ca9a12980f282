"""The report's size and build time, and how fast the what-if page answers, next to the issue's budgets.

    python benchmarks/bench_report.py            # needs chromium on PATH for the in-browser column
    python benchmarks/bench_report.py --json

Rows: the report of every built-in example (with the conversation-trace replay and the training-link
simulation) against the 2 MB budget; then, per built-in scenario, the median time to answer one
control change (the same moves as tests/ui/test_page_browser.py) three ways -- the library alone
(``whatif.answer``), over HTTP on loopback, and in headless Chromium from the input event to the page
updated -- against the 200 ms budget.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aitrinity import api  # noqa: E402
from aitrinity.report import build, page  # noqa: E402
from aitrinity.ui import whatif  # noqa: E402
from aitrinity.ui.headless import Browser, WhatIfPage, find_chromium  # noqa: E402
from aitrinity.ui.server import make_server  # noqa: E402
from tests.ui.test_page_browser import MOVES  # noqa: E402

TRACE = ROOT / "data" / "traces" / "mooncake_conversation_trace.jsonl"
SLIDER = {
    "gpus": lambda v: {"gpus": 2 ** int(v)},
    "batch": lambda v: {"batch": 2 ** int(v)},
    "context": lambda v: {"context": 2 ** int(v)},
    "bandwidth": lambda v: {"bandwidth": f"{10 ** (int(v) / 10):.4g}Mbit/s"},
    "cache": lambda v: {"cache": whatif.CACHE_STOPS[int(v)]},
    "device": lambda v: {"device": v},
    "link": lambda v: {"link": v},
}


def report_row() -> dict[str, float]:
    t = time.perf_counter()
    r = build(api.builtin_scenarios(), trace=TRACE)
    html = page(r)
    return {
        "build_s": time.perf_counter() - t,
        "bytes": len(html.encode()),
        "charts": sum(len(s.figures) for s in r.sections),
        "budget_bytes": 2_000_000,
    }


def what_if_rows(url: str, browser: Browser | None) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    wp = WhatIfPage(browser, url) if browser else None
    for scenario in api.builtin_scenarios():
        kind = whatif.kind_of(scenario)
        forms, lib, http, page_ms = [], [], [], []
        fields: dict[str, object] = {"scenario": scenario}
        for control, value in MOVES[kind]:
            fields = {**fields, **SLIDER[control](value)}
            forms.append(dict(fields))
        for f in forms:
            t = time.perf_counter()
            whatif.answer(whatif.Form.model_validate(f))
            lib.append((time.perf_counter() - t) * 1e3)
            req = urllib.request.Request(
                url + "api/whatif", data=json.dumps(f).encode(), headers={"Content-Type": "application/json"}
            )
            t = time.perf_counter()
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
            http.append((time.perf_counter() - t) * 1e3)
        if wp is not None:
            wp.change("scenario", scenario)
            page_ms = [float(wp.change(c, v)["ms"]) for c, v in MOVES[kind]]
        rows.append(
            {
                "scenario": scenario,
                "changes": len(forms),
                "library_ms": statistics.median(lib),
                "http_ms": statistics.median(http),
                "browser_ms": statistics.median(page_ms) if page_ms else None,
                "budget_ms": 200.0,
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rep = report_row()
    server = make_server("127.0.0.1", 0, quiet=True)
    whatif.warm()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    exe = find_chromium()
    browser = Browser(exe) if exe else None
    try:
        rows = what_if_rows(url, browser)
    finally:
        if browser:
            browser.close()
        server.shutdown()
    if args.json:
        print(json.dumps({"report": rep, "what_if": rows}, indent=2))
        return 0
    print(
        f"report of the built-in examples: {rep['bytes'] / 1e6:.2f} MB ({rep['charts']:.0f} charts) "
        f"vs budget 2 MB; built in {rep['build_s']:.1f} s"
    )
    print(f"\n{'scenario':32} {'changes':>7} {'library':>9} {'HTTP':>9} {'browser':>9} {'budget':>8}")
    for r in rows:
        b = f"{r['browser_ms']:.0f} ms" if r["browser_ms"] is not None else "no chromium"
        print(
            f"{r['scenario']:32} {r['changes']:>7} {r['library_ms']:>6.0f} ms {r['http_ms']:>6.0f} ms {b:>9} "
            f"{r['budget_ms']:>5.0f} ms"
        )
    print("\n(medians per change; browser: from the input event to the page updated, measured in the page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
