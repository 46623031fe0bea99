#!/usr/bin/env python3
"""Builds the tiny DeepSeek checkpoints and golden outputs under tests/fixtures/.

Each fixture is a Hugging Face model directory with random weights in the real checkpoint layout
(DeepSeek's tensor names, per-expert matrices, BF16/F16/F32 and FP8 E4M3 with 128x128
`weight_scale_inv` block scales), plus golden.json (prompt ids, greedy continuation ids) and
golden.safetensors (fp32 logits of every prompt position and of every greedy step) computed by
Hugging Face transformers' native DeepseekV2ForCausalLM / DeepseekV3ForCausalLM in float32 with
eager attention, from exactly the stored weights (rounded to their storage dtype, FP8
dequantised). The head dims are the real ones (kv_lora_rank 512, rope 64, nope 128, v 128);
everything else is small so that the whole set stays a few MB and the C++ tests run in seconds.

Usage (needs torch, transformers >= 5, safetensors, numpy; not needed at test time):
    python3 tests/gen/make_fixtures.py [--out tests/fixtures]
The run is deterministic for a given torch build (seeds below); it refuses to write a fixture
whose greedy continuation has a near-tie (top-1 vs top-2 margin below 1e-3), so that the exact-id
comparison in the C++ tests is meaningful.
"""
import argparse
import json
import math
import os
import platform

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config,
                          DeepseekV3ForCausalLM)

YARN_V2_LITE = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                "mscale": 0.707, "mscale_all_dim": 0.707}
YARN_V3 = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
           "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
           "mscale": 1.0, "mscale_all_dim": 1.0}

FIXTURES = {
    # DeepSeek-V2-Lite-shaped: q_proj (q_lora_rank null), one dense layer first, softmax greedy
    # routing without renormalisation, 2 shared experts, YaRN with mscale 0.707; config.json in
    # the released checkpoints' format (rope_theta + rope_scaling with "type").
    "tiny-deepseek-v2-lite": {
        "arch": "DeepseekV2ForCausalLM",
        "seed": 20240501,
        "prompt_len": 200,
        "generate": 20,
        "shards": 1,
        "fp8": False,
        "hf": dict(vocab_size=256, hidden_size=128, intermediate_size=320,
                   moe_intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=2, n_shared_experts=2, n_routed_experts=8,
                   num_experts_per_tok=3, routed_scaling_factor=1.0, topk_method="greedy",
                   n_group=1, topk_group=1, norm_topk_prob=False, first_k_dense_replace=1,
                   kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128,
                   qk_rope_head_dim=64, v_head_dim=128, max_position_embeddings=163840,
                   rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=0,
                   eos_token_id=1, rope_parameters=YARN_V2_LITE),
        "config_extra": {"model_type": "deepseek_v2", "scoring_func": "softmax",
                         "moe_layer_freq": 1, "aux_loss_alpha": 0.001, "seq_aux": True,
                         "hidden_act": "silu", "attention_bias": False,
                         "torch_dtype": "bfloat16", "use_cache": True},
        "rope_style": "rope_scaling",
    },
    # DeepSeek-V3-shaped: q_a_proj/q_a_layernorm/q_b_proj, sigmoid scores with
    # e_score_correction_bias and noaux_tc group-limited routing (4 groups, best 2), renormalised,
    # routed_scaling_factor 2.5, untied embeddings, linear weights in FP8 E4M3 with block scales
    # (embeddings, norms and the router stay BF16/F32, as in the released V3), sharded weights
    # with an index, config.json in the newer transformers format (rope_parameters).
    "tiny-deepseek-v3": {
        "arch": "DeepseekV3ForCausalLM",
        "seed": 20241226,
        "prompt_len": 150,
        "generate": 20,
        "shards": 2,
        "fp8": True,
        "hf": dict(vocab_size=256, hidden_size=128, intermediate_size=256,
                   moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=4, n_shared_experts=1, n_routed_experts=16,
                   num_experts_per_tok=4, routed_scaling_factor=2.5, n_group=4, topk_group=2,
                   norm_topk_prob=True, first_k_dense_replace=1, kv_lora_rank=512,
                   q_lora_rank=96, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                   max_position_embeddings=163840, rms_norm_eps=1e-6, tie_word_embeddings=False,
                   bos_token_id=0, eos_token_id=1, rope_parameters=YARN_V3,
                   rope_interleave=True, num_nextn_predict_layers=0),
        "config_extra": {"model_type": "deepseek_v3", "topk_method": "noaux_tc",
                         "scoring_func": "sigmoid", "moe_layer_freq": 1, "hidden_act": "silu",
                         "attention_bias": False, "torch_dtype": "bfloat16", "use_cache": True,
                         "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                                 "quant_method": "fp8",
                                                 "weight_block_size": [128, 128]}},
        "rope_style": "rope_parameters",
    },
}

FP8_MAX = 448.0
BLOCK = 128


def checkpoint_tensors(model, config):
    """The HF model's parameters under DeepSeek's checkpoint names (experts split per expert)."""
    out = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().clone()
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix = name[: -len("gate_up_proj")]
            width = config.moe_intermediate_size
            for e in range(tensor.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = tensor[e, :width].contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = tensor[e, width:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            prefix = name[: -len("down_proj")]
            for e in range(tensor.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = tensor[e].contiguous()
        else:
            out[name] = tensor
    return out


def load_checkpoint_tensors(model, tensors):
    """Writes checkpoint-named fp32 values back into the HF model (the inverse of the above)."""
    state = model.state_dict()
    for name in list(state.keys()):
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix = name[: -len("gate_up_proj")]
            count = state[name].shape[0]
            state[name] = torch.stack([torch.cat([tensors[f"{prefix}{e}.gate_proj.weight"],
                                                  tensors[f"{prefix}{e}.up_proj.weight"]])
                                       for e in range(count)])
        elif name.endswith("mlp.experts.down_proj"):
            prefix = name[: -len("down_proj")]
            count = state[name].shape[0]
            state[name] = torch.stack([tensors[f"{prefix}{e}.down_proj.weight"]
                                       for e in range(count)])
        else:
            state[name] = tensors[name]
    model.load_state_dict(state, strict=True)


def random_values(name, shape, generator):
    """Init chosen so that attention is peaked and routing decisive (HF's 0.02 would make both
    nearly uniform): linear weights N(0, 1/in), norms N(1, 0.1), embeddings N(0, 1)."""
    if name.endswith("e_score_correction_bias"):
        return torch.randn(shape, generator=generator) * 0.1
    if "norm" in name:
        return 1.0 + 0.1 * torch.randn(shape, generator=generator)
    if name.endswith("embed_tokens.weight"):
        return torch.randn(shape, generator=generator)
    return torch.randn(shape, generator=generator) / math.sqrt(shape[-1])


def quantize_fp8(weight):
    """128x128 block FP8 E4M3 as DeepSeek-V3 stores it: fp8 values and fp32 scale_inv (the
    factor that dequantises: weight ≈ fp8 · scale_inv)."""
    rows, cols = weight.shape
    block_rows, block_cols = math.ceil(rows / BLOCK), math.ceil(cols / BLOCK)
    scale_inv = torch.empty(block_rows, block_cols, dtype=torch.float32)
    quantized = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    dequantized = torch.empty(rows, cols, dtype=torch.float32)
    for i in range(block_rows):
        for j in range(block_cols):
            block = weight[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            scale = block.abs().max().clamp(min=1e-12) / FP8_MAX
            q = (block / scale).to(torch.float8_e4m3fn)
            scale_inv[i, j] = scale
            quantized[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = q
            dequantized[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = q.float() * scale
    return quantized, scale_inv, dequantized


def is_fp8_weight(name):
    """The released V3 stores the projections of attention and the MLPs in FP8; embeddings,
    lm_head, norms and the router (mlp.gate) stay in higher precision."""
    return name.endswith("_proj.weight") or name.endswith("kv_a_proj_with_mqa.weight")


def build(name, spec, out_dir):
    torch.manual_seed(spec["seed"])
    generator = torch.Generator().manual_seed(spec["seed"])
    hf_kwargs = dict(spec["hf"])
    if spec["arch"] == "DeepseekV2ForCausalLM":
        config = DeepseekV2Config(**hf_kwargs)
        model_class = DeepseekV2ForCausalLM
    else:
        config = DeepseekV3Config(**hf_kwargs)
        model_class = DeepseekV3ForCausalLM
    config._attn_implementation = "eager"
    model = model_class(config).float().eval()

    tensors = checkpoint_tensors(model, config)
    stored, runtime = {}, {}
    for tensor_name in sorted(tensors):
        shape = tuple(tensors[tensor_name].shape)
        values = random_values(tensor_name, shape, generator).float()
        if spec["fp8"] and is_fp8_weight(tensor_name) and tensor_name != "lm_head.weight":
            quantized, scale_inv, dequantized = quantize_fp8(values)
            stored[tensor_name] = quantized
            stored[tensor_name + "_scale_inv"] = scale_inv
            runtime[tensor_name] = dequantized
        elif "norm" in tensor_name or tensor_name.endswith("e_score_correction_bias"):
            # Norm weights in F32 (V2-Lite fixture) or BF16 (V3); the bias is F32 in V3.
            dtype = torch.float32 if (not spec["fp8"] or "bias" in tensor_name) else torch.bfloat16
            stored[tensor_name] = values.to(dtype)
            runtime[tensor_name] = stored[tensor_name].float()
        elif tensor_name == "lm_head.weight" and not spec["fp8"]:
            stored[tensor_name] = values.to(torch.float16)  # exercises the F16 path
            runtime[tensor_name] = stored[tensor_name].float()
        else:
            stored[tensor_name] = values.to(torch.bfloat16)
            runtime[tensor_name] = stored[tensor_name].float()
    # The state dict holds the e_score_correction_bias buffer too, so it is loaded with the rest.
    load_checkpoint_tensors(model, runtime)

    vocab = config.vocab_size
    prompt = torch.randint(2, vocab, (spec["prompt_len"],), generator=generator)
    with torch.no_grad():
        prompt_logits = model(prompt[None]).logits[0].float()
        ids = prompt.clone()
        generated, generated_logits, margins = [], [], []
        for _ in range(spec["generate"]):
            logits = model(ids[None]).logits[0, -1].float()
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            next_id = int(top.indices[0])
            generated.append(next_id)
            generated_logits.append(logits)
            ids = torch.cat([ids, torch.tensor([next_id])])
    prompt_margin = torch.topk(prompt_logits, 2, dim=-1).values
    if min(margins) < 1e-3:
        raise SystemExit(f"{name}: greedy margin {min(margins):.2e} too small; change the seed")

    fixture = os.path.join(out_dir, name)
    os.makedirs(fixture, exist_ok=True)
    for old in os.listdir(fixture):
        os.remove(os.path.join(fixture, old))
    config_json = {"architectures": [spec["arch"]]}
    hf = dict(spec["hf"])
    rope = dict(hf.pop("rope_parameters"))
    hf.pop("num_nextn_predict_layers", None)
    hf.pop("rope_interleave", None)
    config_json.update(hf)
    config_json.update(spec["config_extra"])
    if spec["rope_style"] == "rope_scaling":
        config_json["rope_theta"] = rope.pop("rope_theta")
        rope["type"] = rope.pop("rope_type")
        config_json["rope_scaling"] = rope
    else:
        config_json["rope_parameters"] = rope
    with open(os.path.join(fixture, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2, sort_keys=True)
        f.write("\n")

    names = sorted(stored)
    if spec["shards"] == 1:
        save_file({k: stored[k] for k in names}, os.path.join(fixture, "model.safetensors"),
                  metadata={"format": "pt"})
    else:
        weight_map = {}
        per_shard = math.ceil(len(names) / spec["shards"])
        for shard in range(spec["shards"]):
            file = f"model-{shard + 1:05d}-of-{spec['shards']:05d}.safetensors"
            part = names[shard * per_shard:(shard + 1) * per_shard]
            save_file({k: stored[k] for k in part}, os.path.join(fixture, file),
                      metadata={"format": "pt"})
            weight_map.update({k: file for k in part})
        total = sum(t.numel() * t.element_size() for t in stored.values())
        with open(os.path.join(fixture, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2,
                      sort_keys=True)
            f.write("\n")

    save_file({"prompt_logits": prompt_logits.contiguous(),
               "generated_logits": torch.stack(generated_logits).contiguous()},
              os.path.join(fixture, "golden.safetensors"))
    golden = {
        "fixture": name,
        "architecture": spec["arch"],
        "prompt_ids": prompt.tolist(),
        "generated_ids": generated,
        "seed": spec["seed"],
        "min_greedy_margin": min(margins),
        "min_prompt_top2_margin": float((prompt_margin[:, 0] - prompt_margin[:, 1]).min()),
        "max_abs_prompt_logit": float(prompt_logits.abs().max()),
        "softmax_scale": model.model.layers[0].self_attn.scaling,
        "generator": "tests/gen/make_fixtures.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "dtype": "float32, eager attention",
    }
    with open(os.path.join(fixture, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(fixture, f)) for f in os.listdir(fixture))
    print(f"{name}: {len(stored)} tensors, {size / 1e6:.2f} MB, generated {generated}, "
          f"min greedy margin {min(margins):.4f}, scale {golden['softmax_scale']:.6f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                      "fixtures"))
    parser.add_argument("--only", default=None, help="build one fixture by name")
    args = parser.parse_args()
    torch.set_num_threads(2)
    for name, spec in FIXTURES.items():
        if args.only in (None, name):
            build(name, spec, args.out)


if __name__ == "__main__":
    main()
