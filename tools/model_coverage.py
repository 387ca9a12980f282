"""Which of the models aiconfigurator-core ships a config.json for can ``trinity validate --serving`` price?

The measured runs of that package (its held-out sample included) name their model by Hugging Face id; the package
ships each model's ``config.json`` under ``model_configs/``. This lists, for every shipped config (its file name, not
any measured run):

* ``catalog``: a catalog entry names the id (a name, alias or ``hf_ids`` entry);
* ``config``: the catalog does not, but the importer (:func:`aitrinity.catalog.hf.from_hf_config`) reads the shipped
  config, which :func:`aitrinity.catalog.model` then returns for that id (a scenario may name it; ``validate
  --serving`` prices the run and says so);
* ``neither``: an architecture the importer does not read (its ``model_type``), so such runs are skipped.

    python tools/model_coverage.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aitrinity import catalog
from aitrinity.catalog import kernel_tables as kt
from aitrinity.errors import SpecError, TrinityError


def coverage() -> dict[str, list[dict[str, str]]]:
    folder = kt.data_root().parents[1] / "model_configs"
    out: dict[str, list[dict[str, str]]] = {"catalog": [], "config": [], "neither": []}
    for path in sorted(folder.glob("*_config.json")):
        if path.name.endswith("_hf_quant_config.json"):  # a quantized checkpoint's scales, beside its config
            continue
        hf_id = path.name.removesuffix("_config.json").replace("--", "/", 1)
        model_type = str(json.loads(path.read_text(encoding="utf-8")).get("model_type"))
        try:
            out["catalog"].append({"id": hf_id, "name": catalog.canonical("models", hf_id), "model_type": model_type})
            continue
        except TrinityError:
            pass
        try:
            out["config"].append({"id": hf_id, "name": catalog.model(hf_id).name, "model_type": model_type})
        except SpecError:
            out["neither"].append({"id": hf_id, "name": "", "model_type": model_type})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        out = coverage()
    except SpecError as e:
        print(f"model_coverage: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    total = sum(len(v) for v in out.values())
    for how, rows in out.items():
        print(f"{how}: {len(rows)} of {total} shipped configs")
        if how == "neither":
            types = Counter(r["model_type"] for r in rows)
            print("  model_type: " + ", ".join(f"{t} ({n})" for t, n in sorted(types.items())))
        else:
            print("  " + ", ".join(r["id"] + (f" -> {r['name']}" if how == "catalog" else "") for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
