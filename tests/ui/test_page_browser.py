"""The what-if page in real headless Chromium against a real server: every built-in scenario answers each
slider change, shows the library's answer, and shows the CLI's message for bad input; the console stays
clean and a screenshot is kept. How fast it answers (the 200 ms budget) is measured in
benchmarks/bench_report.py, not asserted here: a loaded machine is slower, not wrong."""

import threading

import pytest

from aitrinity import api
from aitrinity.ui import whatif
from aitrinity.ui.headless import WhatIfPage
from aitrinity.ui.server import make_server

pytestmark = pytest.mark.browser

# slider positions: GPUs / batch / context are powers of two (2^value), bandwidth 10^(value/10) Mbit/s,
# cache the index of a capacity stop
MOVES = {
    "training": [("bandwidth", "45"), ("gpus", "9"), ("batch", "10"), ("context", "11"), ("bandwidth", "38")],
    "serving": [("bandwidth", "45"), ("batch", "4"), ("context", "14"), ("cache", "3"), ("gpus", "4")],
    "edge": [("bandwidth", "5"), ("bandwidth", "12"), ("device", "jetson-orin-nano"), ("link", "5g-uplink")],
}


@pytest.fixture(scope="module")
def page_url():
    server = make_server("127.0.0.1", 0, quiet=True)
    whatif.warm()  # as `trinity ui` does before it listens
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_what_if_page_answers_right(browser, page_url, artifacts):
    w = WhatIfPage(browser, page_url)
    p = w.page
    for scenario in api.builtin_scenarios():
        w.change("scenario", scenario)
        kind = whatif.kind_of(scenario)
        for control, value in MOVES[kind]:
            last = w.change(control, value)
            assert last["ok"], (scenario, control, value, last)
            assert last["ms"] > 0
        # the page shows what the library answers for the same form
        form = p.eval("form()")
        expected = whatif.answer(whatif.Form(**form))
        assert w.text("verdict") == expected.verdict
        assert w.text("best") == (expected.best or "no plan fits")
        charts = p.eval("[...document.querySelectorAll('#charts svg.chart')].map(s => s.getBoundingClientRect().width)")
        assert len(charts) == len(expected.charts) and all(width > 200 for width in charts)
        if kind != "edge":
            assert p.eval("document.getElementById('gpus').disabled") is False
        else:
            assert p.eval("document.getElementById('gpus').disabled") is True
    p.screenshot(artifacts / "whatif.png")
    assert p.errors() == []

    # bad input: a 131,072-token prompt is over llama-3.1-70b's context with the output tokens
    w.change("scenario", "llama-70b-serving-long-context")
    last = w.change("context", "17")
    assert not last["ok"]
    with pytest.raises(Exception) as err:
        api.diagnose("llama-70b-serving-long-context", ["workload.serving.prompt_tokens=131072"])
    assert w.text("error") == str(err.value)
    assert p.eval("getComputedStyle(document.getElementById('error')).display") == "block"
    p.screenshot(artifacts / "whatif-error.png")
    # the only thing logged is the browser's own note of the server's 400 answer
    assert p.errors() == ["log: Failed to load resource: the server responded with a status of 400 (Bad Request)"]
