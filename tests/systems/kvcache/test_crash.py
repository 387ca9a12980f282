"""A writer killed mid-write (SIGKILL) never leaves a torn block that a restarted store would serve."""

import os
import signal
import subprocess
import sys
import time

import pytest

from aitrinity.systems.kvcache import DiskTier, Keyer, KVStore, TierConfig

pytestmark = pytest.mark.multiproc

WRITER = """
import sys
from aitrinity.systems.kvcache import DiskTier, Keyer, KVStore, TierConfig
k = Keyer.of("t", block_tokens=4)
s = KVStore([TierConfig(DiskTier(sys.argv[1], k.namespace))])
i = 0
while True:
    bk = k.keys([i, i + 1, i + 2, i + 3])
    key = bk.keys[0]
    s.put_blocks(bk, [(key * 262144)])  # 4 MiB, derived from the key
    i += 1
    print(i, flush=True)
"""


def test_killed_writer_leaves_only_whole_blocks(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(3):  # let it finish a few blocks, then kill it in the middle of others
            assert proc.stdout.readline()
        time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    k = Keyer.of("t", block_tokens=4)
    s = KVStore([TierConfig(DiskTier(tmp_path, k.namespace))])
    files = list((tmp_path / k.namespace).iterdir())
    assert not [f for f in files if f.name.startswith(".tmp-")]
    assert len(s.index[0]) >= 3
    for key in s.index[0]:
        got = s.tiers[0].tier.get(key)
        assert not hasattr(got, "reason")
        assert bytes(got)[-(4 << 20) :] == key * 262144
