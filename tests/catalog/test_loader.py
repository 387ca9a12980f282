import json

import pytest
import yaml

from aitrinity import catalog
from aitrinity.errors import SpecError, UnknownNameError


@pytest.mark.parametrize("kind", catalog.KINDS)
def test_every_entry_loads_and_has_a_source(kind):
    names = catalog.names(kind)
    assert names
    for name in names:
        k, spec = catalog.entry(name)
        assert k == kind
        assert spec.name == name == name.lower() and " " not in name
        if kind not in ("scenarios", "suites"):  # described, not sourced
            assert spec.source.strip()


def test_required_catalog_coverage():
    assert {
        "a100-40gb-sxm",
        "a100-80gb-sxm",
        "h100-sxm",
        "h100-pcie",
        "h200",
        "b200",
        "b300",
        "gb200",
        "gb300",
        "mi300x",
        "mi325x",
        "mi355x",
        "h20",
        "l4",
        "l40s",
        "rtx-4090",
        "epyc-9654",
        "tpu-v5p",
        "tpu-v6e",
    } <= set(catalog.names("devices"))
    assert {
        "nvlink-3",
        "nvlink-4",
        "nvlink-5",
        "pcie-4-x16",
        "pcie-5-x16",
        "infiniband-hdr",
        "infiniband-ndr",
        "ethernet-25g",
        "ethernet-100g",
        "ethernet-200g",
        "ethernet-400g",
        "ici-v5p",
        "ici-v6e",
    } <= set(catalog.names("links"))
    assert {"host-dram", "nvme-gen4", "remote-pool"} <= set(catalog.names("tiers"))
    assert {
        "gpt-3-175b",
        "opt-13b",
        "opt-175b",
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3.1-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "mistral-7b",
        "mixtral-8x7b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "deepseek-v3",
    } <= set(catalog.names("models"))


def test_hf_ids_and_aliases_resolve_to_the_same_entry():
    assert catalog.model("meta-llama/Llama-3.1-70B") is catalog.model("llama-3.1-70b")
    assert catalog.model("META-LLAMA/llama-3.1-70b") is catalog.model("llama-3.1-70b")
    assert catalog.device("H100") is catalog.device("h100-sxm")
    assert catalog.link("ndr").name == "infiniband-ndr"


@pytest.mark.parametrize(
    ("hf_id", "name"),
    [
        # quantized checkpoints keep their architecture: the row's dtype says how it runs
        ("nvidia/Llama-3.1-70B-Instruct-FP8", "llama-3.1-70b"),
        ("nvidia/Qwen3-235B-A22B-NVFP4", "qwen3-235b-a22b"),
        ("nvidia/DeepSeek-V3.1-NVFP4", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3"),
        ("Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b"),
        # the models aiconfigurator-core ships configs for that the catalog names
        ("Qwen/Qwen3-8B", "qwen3-8b"),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3-coder-480b-a35b"),
        ("openai/gpt-oss-20b", "gpt-oss-20b"),
        ("mistralai/Mixtral-8x22B-v0.1", "mixtral-8x22b"),
        ("nvidia/Kimi-K2.6-NVFP4", "kimi-k2.5"),
    ],
)
def test_checkpoint_ids_name_their_architecture(hf_id, name):
    assert catalog.canonical("models", hf_id) == name


def test_new_entries_match_the_configs_they_cite():
    """Each entry written from a Hugging Face config.json equals what the config importer reads from that file, where
    aiconfigurator-core (the ``[silicon]`` extra, installed for the tests) ships it."""
    from importlib.resources import files

    from aitrinity.catalog.hf import from_hf_config

    shipped = files("aiconfigurator_core") / "model_configs"
    fields = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "dim_head", "intermediate_size")
    for name, config in [
        ("qwen3-8b", "Qwen--Qwen3-8B"),
        ("qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B"),
        ("qwen3-coder-480b-a35b", "Qwen--Qwen3-Coder-480B-A35B-Instruct"),
        ("gpt-oss-20b", "openai--gpt-oss-20b"),
        ("mixtral-8x22b", "mistralai--Mixtral-8x22B-v0.1"),
        ("deepseek-v3", "nvidia--DeepSeek-V3.1-NVFP4"),
        ("kimi-k2.5", "moonshotai--Kimi-K2.5"),  # model_type kimi_k25: the text model in text_config
    ]:
        m = catalog.model(name)
        hf = from_hf_config(json.loads((shipped / f"{config}_config.json").read_text()), name)
        assert [getattr(m, f) for f in fields] == [getattr(hf, f) for f in fields], name
        assert (m.vocab_size, m.max_seq_len, m.moe, m.sliding_window, m.mla) == (
            hf.vocab_size,
            hf.max_seq_len,
            hf.moe,
            hf.sliding_window,
            hf.mla,
        ), name


def test_a_model_aiconfigurator_ships_a_config_for_is_usable_by_its_id():
    """With the [silicon] extra a scenario may name any model whose config.json aiconfigurator-core ships (the
    importer reading its architecture); the spec's source names the file. Unknown ids are still one-line errors."""
    from aitrinity import api

    glm = catalog.model("zai-org/GLM-5")
    assert glm.moe is not None and "aiconfigurator_core" in glm.source and glm.name == "glm-5"
    r = api.resolve("llama-70b-serving-long-context", overrides=["model=MiniMaxAI/MiniMax-M2.5"])
    assert r.model.name == "minimax-m2.5" and r.model.moe.num_experts == 256
    with pytest.raises(UnknownNameError):
        catalog.model("acme/NoSuchModel-7B")
    with pytest.raises(SpecError, match="qwen3_5"):  # shipped, but an architecture the importer does not read
        catalog.model("Qwen/Qwen3.5-27B")


def test_unknown_names_suggest_the_closest():
    with pytest.raises(UnknownNameError) as e:
        catalog.model("llama-3.1-70")
    assert "llama-3.1-70b" in e.value.suggestions
    with pytest.raises(UnknownNameError) as e:
        catalog.device("h100-sxn")
    assert e.value.suggestions[0] == "h100-sxm"
    assert "\n" not in str(e.value)


def test_peak_flops_follow_dense_datasheet_figures():
    h100 = catalog.device("h100-sxm")
    assert h100.peak_flops_for("bf16") == pytest.approx(989.4e12)
    assert h100.memory_bandwidth_Bps == pytest.approx(3.35e12)
    assert catalog.device("a100-80gb-sxm").peak_flops_for("fp16") == pytest.approx(312e12)
    with pytest.raises(SpecError):
        catalog.device("a100-80gb-sxm").peak_flops_for("fp8")  # Ampere has no fp8


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if name.endswith((".yaml", ".yml")) else json.dumps(data))
    return str(p)


def test_user_files_are_validated_and_reject_unknown_keys(tmp_path):
    good = catalog.device("l4").model_dump(mode="json")
    good["name"] = "my-l4"
    assert catalog.device(_write(tmp_path, "mine.yaml", good)).name == "my-l4"
    bad = dict(good, colour="green")
    with pytest.raises(SpecError) as e:
        catalog.device(_write(tmp_path, "bad.yaml", bad))
    assert e.value.field.endswith("colour")
    neg = dict(good, memory_capacity_bytes="-3 GB")
    with pytest.raises(SpecError) as e:
        catalog.device(_write(tmp_path, "neg.yaml", neg))
    assert e.value.field.endswith("memory_capacity_bytes")


def test_hf_config_json_gives_the_catalog_architecture(tmp_path):
    cfg = {
        "_name_or_path": "meta-llama/Llama-3.1-8B",
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "head_dim": 128,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
    }
    from aitrinity.cost.params import count

    m = catalog.model(_write(tmp_path, "config.json", cfg))
    assert count(m).total == count(catalog.model("llama-3.1-8b")).total
    with pytest.raises(SpecError) as e:
        catalog.model(_write(tmp_path, "other.json", {"model_type": "bert"}))
    assert "model_type" in e.value.field


def test_hf_config_for_deepseek_and_opt(tmp_path):
    from aitrinity.cost.params import count

    ds = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "topk_method": "noaux_tc",
        "tie_word_embeddings": False,
    }
    assert count(catalog.model(_write(tmp_path, "ds.json", ds))).total == count(catalog.model("deepseek-v3")).total
    opt = {
        "model_type": "opt",
        "hidden_size": 5120,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "ffn_dim": 20480,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
        "word_embed_proj_dim": 5120,
    }
    assert count(catalog.model(_write(tmp_path, "opt.json", opt))).total == count(catalog.model("opt-13b")).total


def test_broken_yaml_is_a_one_line_error(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(SpecError) as e:
        catalog.load_scenario(str(p))
    assert "line" in str(e.value) and "\n" not in str(e.value)


# --- hostile files (issue 17) ----------------------------------------------------------------------------------


def test_a_file_that_is_not_a_mapping_is_refused_without_echoing_its_text(tmp_path):
    """A text file named as a scenario, device or suite (``trinity diagnose /etc/passwd``) printed its first line back
    in the error; the error now says what the file is instead."""
    from aitrinity.catalog.loader import suite
    from aitrinity.errors import SpecError

    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    for load, path, got in [
        (catalog.load_scenario, secret, "got a YAML str"),
        (catalog.device, secret, "got a YAML str"),
        (suite, secret, "got a YAML str"),
        (catalog.load_scenario, listed, "got a YAML list"),
        (catalog.load_scenario, empty, "got an empty file"),
    ]:
        with pytest.raises(SpecError) as e:
            load(str(path))
        text = str(e.value)
        assert "root:x" not in text and "expected a YAML mapping of its fields" in text and got in text, text


def test_a_non_utf8_file_is_one_line(tmp_path):
    from aitrinity.catalog.loader import read_yaml
    from aitrinity.errors import SpecError

    p = tmp_path / "s.yaml"
    p.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(SpecError, match="not UTF-8 text"):
        read_yaml(p)


def test_an_alias_bomb_is_refused_quickly(tmp_path):
    from aitrinity.catalog.loader import read_yaml
    from aitrinity.errors import SpecError

    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, cur in zip("abcdefg", "bcdefgh", strict=True):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")  # 9^8 = 43 million leaves once expanded
    with pytest.raises(SpecError, match="aliases"):
        read_yaml(p)
    ok = tmp_path / "ok.yaml"
    ok.write_text("base: &b {x: 1}\nuse: [*b, *b]\n")  # ordinary anchors still work
    assert read_yaml(ok) == {"base": {"x": 1}, "use": [{"x": 1}, {"x": 1}]}


@pytest.mark.parametrize("name", ["a\x00b", "x" * 5000, "a/" + "x" * 5000 + ".yaml", "../" * 50 + "etc/passwd"])
def test_names_the_os_cannot_look_up_are_unknown_names(name):
    from aitrinity import api
    from aitrinity.errors import TrinityError

    with pytest.raises(TrinityError) as err:
        api.diagnose(name)
    assert len(str(err.value)) < 500 and "\n" not in str(err.value)


def _ep64_training(device, **system):
    from aitrinity import api
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    scenario = {
        "name": "ep64",
        "system": {"device": device, "num_devices": 64, **system},
        "workload": {"model": "deepseek-v3", "training": {"seq_len": 4096, "global_batch": 512}},
        "plan": {"ep": 64, "zero": 1, "recompute": "full"},
    }
    r = api.resolve(validate(Scenario, scenario, "ep64"))
    channels = {t.purpose: t.channel for ph in api.ledger(r).phases for t in ph.traffic}
    return r.system, channels["EP token all-to-all"]


def test_an_nvl72_rack_is_one_nvlink_domain_and_keeps_a_64_way_all_to_all_on_it():
    """GB200 / GB300 NVL72: 72 GPUs on one NVLink domain (the device's typical_devices_per_node), so a 64-way
    expert-parallel all-to-all stays on NVLink; on 8-GPU HGX B300 nodes it crosses the XDR network. A scenario's
    own devices_per_node wins."""
    for device in ("gb200", "gb300"):
        system, channel = _ep64_training(device)
        assert system.devices_per_node == 72 and channel == "intra_node"
        assert system.intra_node_link.name == "nvlink-5"
    system, channel = _ep64_training("b300")
    assert system.devices_per_node == 8 and channel == "inter_node"
    assert system.inter_node_link is not None and system.inter_node_link.name == "infiniband-xdr"
    system, channel = _ep64_training("gb200", devices_per_node=4)
    assert system.devices_per_node == 4 and channel == "inter_node"


def test_tpus_carry_googles_published_figures_and_no_power():
    """TPU v5p / v6e as Google's system-architecture pages give them; Google publishes no per-chip power, so the
    entries have none and energy is left out (as $ without a price) until a scenario gives one."""
    v6e, v5p = catalog.device("trillium"), catalog.device("v5p")
    assert (v6e.name, v5p.name) == ("tpu-v6e", "tpu-v5p")
    assert v6e.peak_flops["bf16"] == 918e12 and v6e.memory_bandwidth_Bps == 1638e9
    assert v6e.memory_capacity_bytes == 32 * 2**30 and v6e.typical_devices_per_node == 256
    assert v5p.peak_flops["bf16"] == v5p.peak_flops["fp8"] == 459e12 and v5p.memory_bandwidth_Bps == 2765e9
    assert v5p.memory_capacity_bytes == 95 * 2**30
    # ICI: the bidirectional per-chip figure, halved per direction; DCN per chip
    assert catalog.link(v6e.typical_intra_node_link).bandwidth_Bps == 400e9
    assert catalog.link(v5p.typical_intra_node_link).bandwidth_Bps == 600e9
    assert catalog.link(v6e.typical_inter_node_link).bandwidth_Bps == 100e9 / 8
    assert catalog.link(v5p.typical_inter_node_link).bandwidth_Bps == 50e9 / 8
    for d in (v6e, v5p):
        assert d.kind == "accelerator" and d.tdp_W is None and d.price_per_hour_usd is None
        assert "no per-chip power" in d.source
    # no fp32 peak: the error suggests a dtype the chip has (it used to suggest fp32 whatever was missing)
    with pytest.raises(SpecError, match=r"bf16, fp16, int8 \(e\.g\. --set plan\.compute_dtype=bf16\)"):
        v6e.peak_flops_for("fp32")


def test_a_tpu_pod_keeps_its_all_to_all_on_the_ici_and_prices_no_energy():
    system, channel = _ep64_training("tpu-v6e")
    assert system.devices_per_node == 256 and channel == "intra_node"
    assert system.intra_node_link.name == "ici-v6e"
    from aitrinity import api
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    scenario = {
        "name": "tpu",
        "system": {"device": "tpu-v5p", "num_devices": 16},
        "workload": {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "global_batch": 64}},
        "plan": {"zero": 1},
    }
    est = api.estimate(api.resolve(validate(Scenario, scenario, "tpu")))
    assert est.training is not None and est.training.joules_per_step is None and est.training.total_joules is None
    scenario["system"]["power_per_device"] = "400 W"
    est = api.estimate(api.resolve(validate(Scenario, scenario, "tpu")))
    assert est.training is not None and est.training.joules_per_step == pytest.approx(
        400 * 16 * est.training.step_time_s
    )


def _system(device, **system):
    from aitrinity.catalog.loader import resolve_system
    from aitrinity.spec.scenario import SystemInput

    return resolve_system(SystemInput(device=device, host_memory="host-dram", storage="nvme-gen4", **system))


def test_a_hosts_dram_is_shared_by_its_own_devices_not_the_whole_scale_up_domain():
    """An NVL72 rack is one NVLink domain of 72 GPUs but 18 hosts (compute trays) of 4, a TPU pod 256 chips on hosts
    of 4 (v5p) or 8 (v6e): the host tiers and the CPU's memory bandwidth are shared by a host's devices. They were
    divided over the whole domain (2 TiB of host DRAM was 28 GiB a GB200 GPU, 512 GiB now)."""
    dram = catalog.tier("host-dram")
    for device, host in (("gb200", 4), ("gb300", 4), ("tpu-v5p", 4), ("tpu-v6e", 8), ("h100-sxm", 8)):
        s = _system(device, num_devices=144)
        assert s.host_share == host, device
        assert s.tier_capacity_per_device("host") == dram.capacity_bytes / host
        assert s.tier_capacity_per_device("ssd") == catalog.tier("nvme-gen4").capacity_bytes / host
        assert s.channel("host_dram").bandwidth_Bps == dram.bandwidth_Bps / host
    assert _system("gb200", num_devices=2).host_share == 2  # fewer devices than a host
    assert _system("gb200", num_devices=72, devices_per_host=2).host_share == 2  # the scenario's own
    assert _system("tpu-v6e", num_devices=64, devices_per_node=4).host_share == 4  # a node made smaller than a host
    with pytest.raises(SpecError, match=r"^system: devices_per_host 16 is more than devices_per_node 8: "):
        _system("h100-sxm", num_devices=16, devices_per_host=16)
