"""``trinity ui``: serve the what-if page locally."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from aitrinity.cli.jsonout import dump
from aitrinity.cli.progress import Progress
from aitrinity.errors import SpecError

HELP = """examples:
  trinity ui                          http://127.0.0.1:8765, the built-in scenarios
  trinity ui --port 0 --json          a free port; prints {"url": ...} once it listens
  trinity ui --host 0.0.0.0           reachable from other machines (warns: no authentication, trusted networks only)

The page calls the same library as the CLI and shows the same error messages.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ui",
        help="a local what-if page: pick model, hardware, link and job, move sliders",
        description="Serve a what-if page: pick a built-in scenario, a catalog model, device and link, move the "
        "batch, context, GPU, bandwidth and cache-capacity sliders, and see the diagnosis, the best plan and the "
        "chain update.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free port)")
    p.add_argument("--no-warm", dest="warm", action="store_false", help="skip replaying the cache slider's stops")
    p.add_argument("--quiet", action="store_true", help="no request log or progress on stderr")
    p.add_argument("--json", action="store_true", help='print {"url": ...} as JSON when listening')


def run(args: argparse.Namespace) -> int:
    from aitrinity.ui import whatif
    from aitrinity.ui.server import is_loopback, make_server

    if not 0 <= args.port <= 65535:
        raise SpecError("--port", args.port, "0 to 65535")

    say = Progress(args.quiet).say
    if not is_loopback(args.host):
        print(
            f"trinity ui: warning: listening on {args.host}, not loopback: anyone who can reach this machine can "
            "use the page (no authentication) and spend its CPU; use it on trusted networks only",
            file=sys.stderr,
        )

    try:
        server = make_server(args.host, args.port, args.quiet)
    except OSError as e:
        raise SpecError("--port", args.port, f"a port this machine can listen on ({e.strerror})") from None
    host, port = server.server_address[:2]
    url = f"http://{host if isinstance(host, str) else host.decode()}:{port}/"
    whatif.options()
    if args.warm:
        whatif.warm(say)
    print(dump({"url": url}) if args.json else f"trinity ui: serving {url} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        say("stopped")
    finally:
        server.server_close()
    return 0
