"""Generated bad input through the real entry point (hypothesis, deterministic): every case either exits 2
with a line or a few, or exits 0 with only finite, non-negative times -- never a traceback, never a hang.

The case generators and the verdict are tools/fuzz.py's (which runs 10,000+ of them and tallies them);
here hypothesis draws the seeds, so a failure shrinks to one seed and is replayed by
``python tools/fuzz.py --cases 1 --seed N``-style reproduction in the message.
"""

import random
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.fuzz import Cases, run_case

FAMILIES = ["diagnose", "plan", "catalog", "kv", "simulate", "misc"]


@settings(max_examples=120, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), family=st.sampled_from(FAMILIES))
def test_every_command_answers_bad_input_without_a_traceback(tmp_path_factory, seed, family):
    gen = Cases(random.Random(seed), tmp_path_factory.mktemp("fuzz"))
    argv = gen.families()[family]()
    verdict, rc = run_case(argv, timeout_s=60.0)
    assert verdict == "", f"{verdict} (exit {rc}) for {[a[:80] for a in argv]}"
