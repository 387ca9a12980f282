"""``trinity report``: one self-contained HTML file with the charts and their numbers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aitrinity.catalog.loader import is_file
from aitrinity.catalog.traces import CONVERSATION_TRACE, conversation_trace
from aitrinity.cli.args import output_file
from aitrinity.cli.jsonout import dump
from aitrinity.cli.progress import Progress
from aitrinity.errors import SpecError

HELP = f"""examples:
  trinity report -o report.html                     every built-in example (what the README's first command runs)
  trinity report llama-70b-training-h100 --set link=25Gbit/s -o what-if.html
  trinity report my.yaml --trace my-requests.jsonl --no-simulate -o mine.html
  trinity report --json > report.json               the report's numbers, no HTML unless -o is given

The page has no script and loads nothing: it opens offline and prints. Each chart's numbers
are in the table under it. The hit-rate curve replays --trace (default: the built-in Mooncake
conversation trace, {CONVERSATION_TRACE.name}).
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="a self-contained HTML report: diagnosis, roofline, chain, Pareto, replays, simulation",
        description="Diagnose and plan scenarios and write one HTML file: the diagnosis summary, utilization per "
        "phase, the roofline, the exchange chain around the compute / bandwidth / memory triangle, the Pareto "
        "frontier, hit rate vs capacity from a trace replay and a simulation timeline of what bound when.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenario files or built-in names (default: all)")
    p.add_argument("-o", "--output", metavar="FILE", help="the HTML file to write (default report.html)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides", help="what-if change")
    p.add_argument(
        "--trace",
        metavar="FILE",
        help=f"request trace for the hit-rate curve (default: the built-in {CONVERSATION_TRACE.name})",
    )
    p.add_argument("--no-simulate", dest="simulate", action="store_false", help="leave the simulation out")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print the report's data as JSON (HTML only with -o)")


def run(args: argparse.Namespace) -> int:
    from aitrinity import api
    from aitrinity.report import build, page

    say = Progress(args.quiet).say

    trace = Path(args.trace) if args.trace else conversation_trace()
    if not is_file(trace):
        raise SpecError("--trace", args.trace, "an existing request trace file (Mooncake JSONL)")
    refs = args.scenarios or api.builtin_scenarios()
    for ref in refs:  # a wrong name fails now, before minutes of work
        api.load(ref)
    output = args.output or (None if args.json else "report.html")
    output_file("-o", output)
    report = build(refs, args.overrides, trace, args.simulate, progress=say)
    if output:
        html = page(report)
        Path(output).write_text(html, encoding="utf-8")
        charts = sum(len(s.figures) for s in report.sections)
        say(f"wrote {output} ({len(html.encode()) / 1e3:,.0f} kB, {charts} charts)")
    if args.json:
        print(dump(report.model_dump(mode="json")))
    return 0
