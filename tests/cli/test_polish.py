"""CLI conventions that hold for every command: --json, --quiet, --help with examples, completion, progress."""

import io
import subprocess
import sys

import pytest

from aitrinity.cli.main import _parser, leaves
from aitrinity.cli.progress import Progress


def _commands():
    return [(leaf.prog, leaf) for leaf in leaves(_parser())]


@pytest.mark.parametrize("prog, leaf", _commands(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_takes_json_and_quiet_and_shows_examples(prog, leaf):
    opts = {o for a in leaf._actions for o in a.option_strings}
    assert {"--json", "--quiet"} <= opts or prog.endswith("completion"), prog
    text = leaf.format_help()
    assert "examples:" in text or "install:" in text, prog


def _trinity(*args: str) -> str:
    """The checkout's CLI (not whatever ``trinity`` is on PATH)."""
    cmd = [sys.executable, "-m", "aitrinity.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def _complete(words: str) -> list[str]:
    script = _trinity("completion", "bash")
    cmd = (
        f'{script}\nread -ra COMP_WORDS <<< "{words}"\n'
        f'[[ "{words}" == *" " ]] && COMP_WORDS+=("")\n'
        'COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _trinity; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True).stdout.split()


def test_bash_completion_knows_commands_choices_and_scenarios():
    assert _complete("trinity dia") == ["diagnose"]
    assert set(_complete("trinity plan x --objective ")) == {"time", "throughput", "latency", "cost", "energy"}
    assert "llama-70b-training-h100" in _complete("trinity diagnose llama")
    assert _complete("trinity simulate tr") == ["training-link"]
    assert "--capacity" in _complete("trinity kv replay --cap")


def test_zsh_and_fish_scripts_name_every_command():
    for shell in ("zsh", "fish"):
        out = _trinity("completion", shell)
        for cmd in ("diagnose", "plan", "report", "ui", "simulate", "kv"):
            assert cmd in out, (shell, cmd)


def test_progress_prints_lines_off_a_terminal_and_nothing_when_quiet():
    buf = io.StringIO()
    p = Progress(stream=buf, min_interval_s=3600)
    p.say("reading")
    for i in range(1, 11):
        p.step(i, 10, "jobs")
    assert buf.getvalue().splitlines() == ["trinity: reading", "trinity: 1/10 jobs", "trinity: 10/10 jobs"]
    quiet = io.StringIO()
    q = Progress(quiet=True, stream=quiet)
    q.say("x")
    q.step(1, 1)
    assert quiet.getvalue() == ""


def test_progress_is_silent_for_work_done_within_after_s(monkeypatch):
    """Off a terminal, ``after_s``: no line for work done within it; lines once it runs longer (on a fake clock)."""
    from aitrinity.cli import progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    brief = io.StringIO()
    b = Progress(stream=brief, after_s=1.0)
    for i in range(1, 5):
        clock[0] += 0.2
        b.step(i, 4, "plans")
    assert brief.getvalue() == ""
    long = io.StringIO()
    p = Progress(stream=long, after_s=1.0)
    for i in range(1, 9):
        clock[0] += 0.3
        p.step(i, 8, "plans")
    assert long.getvalue().splitlines() == ["trinity: 4/8 plans", "trinity: 8/8 plans"]


def test_progress_bar_redraws_in_place_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    buf = Tty()
    p = Progress(stream=buf)
    p.step(1, 4, "x")
    p.step(4, 4, "x")
    out = buf.getvalue()
    assert out.count("\r") == 2 and out.endswith("4/4 x\x1b[K\n") and "[" + "#" * 30 + "]" in out


def test_quiet_silences_progress(capsys):
    from aitrinity.cli.main import main

    assert main(["report", "trillion-param-training", "--no-simulate", "--json", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_is_a_quiet_exit():
    import subprocess
    import sys

    p = subprocess.Popen(
        [sys.executable, "-m", "aitrinity.cli.main", "plan", "llama-70b-training-h100", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(5)
    p.stdout.close()  # the reader leaves, as `| head -c 5` does
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_an_internal_error_is_one_line_and_the_traceback_needs_debug(monkeypatch, capsys):
    from aitrinity import api
    from aitrinity.cli.main import main

    def boom(*a, **k):
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(api, "diagnose", boom)
    assert main(["diagnose"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "trinity: internal error: RuntimeError: a bug (trinity --debug ... shows the traceback)"
    import pytest

    with pytest.raises(RuntimeError):
        main(["--debug", "diagnose"])
