"""Tokens per CPU-second of language-model audits, and what a GPT-2 124M LoRA family costs.

Measured on this machine, one thread (CPU-seconds: ``time.process_time``):

1. the fortunes example's GPT-2 (2 layers, dim 64, 257 byte tokens, 49 positions, and 257
   positions for whole fortunes of varied length): the query
   (per-token log p, mu, sigma, correctness) over Debian's cookie fortunes (or random texts
   of the same lengths when the package is missing), length-batched as the query stage does
   now and padded to the longest text as it did before; and training (full fine-tuning);
2. a GPT-2 124M (12 layers, dim 768, 50257 tokens; random weights: the cost does not depend
   on them) on 128-token texts: the query, and LoRA training steps (r 16, forward and
   backward).

From these it states the cost of a 16-model GPT-2 124M LoRA family on 20,000 texts (the
``examples/text/gpt2_lora.yaml`` audit) on this CPU (measured rates x token counts) and on a
GPU (an ESTIMATE from FLOPs: no GPU was measured).

    PYTHONPATH=src python benchmarks/text_throughput.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

COOKIE = Path("/usr/share/games/fortunes/cookie")


def cpu_seconds(function, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        function()
        times.append(time.process_time() - started)
    return float(np.median(times))


def fortune_inputs(count: int, width: int = 49) -> torch.Tensor:
    """(count, width) byte-token rows of cookie fortunes (BOS 256, PAD -1)."""
    if COOKIE.is_file():
        from miaudit.data.text import byte_tokenizer, pack, read_documents

        texts = read_documents(COOKIE, "fortune", "text")[:count]
        samples = [byte_tokenizer().encode(t)[: width - 1] for t in texts]
    else:  # the cookie file's length profile is mostly short: a geometric stand-in
        rng = np.random.default_rng(0)
        samples = [list(rng.integers(32, 127, min(width - 1, 1 + int(rng.geometric(1 / 30)))))
                   for _ in range(count)]
        from miaudit.data.text import pack
    x = pack(samples, 256)
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=-1)


def tiny(args: argparse.Namespace, width: int) -> dict:
    from miaudit.models.causal_lm import causal_lm
    from miaudit.recipes.language_model import LanguageModel
    from miaudit.training import TrainEnv, TrainParams

    torch.manual_seed(0)
    model = causal_lm(input_shape=(width,), num_classes=257, dim=64, heads=4, layers=2).eval()
    x = fortune_inputs(args.texts, width)
    tokens = int((x[:, 1:] != -1).sum())
    batched = cpu_seconds(lambda: model(x))

    def padded() -> None:  # the query before length batching: rows in order, full width
        rows = max(1, (1 << 25) // (x.shape[1] * 257))
        with torch.no_grad():
            for start in range(0, len(x), rows):
                model._stats(x[start : start + rows])

    padded_seconds = cpu_seconds(padded)
    params = TrainParams(epochs=1, batch_size=8, optimizer="adam", lr=0.001,
                         weight_decay=0.0, schedule="constant")
    started = time.process_time()
    LanguageModel().train(model.train(), x, torch.zeros(len(x), dtype=torch.int64), params,
                          TrainEnv(seed=0))
    train_seconds = time.process_time() - started
    return {"width": width, "texts": len(x), "tokens": tokens,
            "mean_tokens_per_text": tokens / len(x),
            "query_tokens_per_cpu_s": tokens / batched,
            "query_tokens_per_cpu_s_padded": tokens / padded_seconds,
            "train_tokens_per_cpu_s": tokens / train_seconds}


def gpt2_124m(args: argparse.Namespace) -> dict:
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    from miaudit.models.causal_lm import CausalLM

    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config())  # 124M: 12 layers, dim 768, 50257 tokens
    params = sum(p.numel() for p in lm.parameters())
    model = CausalLM(lm, 50257).eval()
    x = torch.randint(0, 50256, (args.big_texts, 129))
    x[:, 0] = 50256
    tokens = args.big_texts * 128
    query = cpu_seconds(lambda: model(x), repeats=1)
    lora = get_peft_model(lm, LoraConfig(r=16, lora_alpha=32, fan_in_fan_out=True))
    trained = CausalLM(lora, 50257).train()
    optimizer = torch.optim.AdamW([p for p in trained.parameters() if p.requires_grad], 5e-4)

    def step() -> None:
        optimizer.zero_grad()
        trained.sample_nll(x).mean().backward()
        optimizer.step()

    step()  # warm-up (allocations)
    train = cpu_seconds(step, repeats=2)
    return {"parameters": params, "tokens_per_call": tokens,
            "query_tokens_per_cpu_s": tokens / query,
            "lora_train_tokens_per_cpu_s": tokens / train}


def family_cost(rates: dict, models: int = 16, pool: int = 20_000, tokens: int = 128,
                epochs: int = 4, population: float = 0.1, prefix_texts: int = 5) -> dict:
    """The gpt2_lora.yaml family: each model trains on half the audited texts for ``epochs``
    and queries every text once (identity), plus the two prefix queries (each text after
    ``prefix_texts`` texts) when ReCaLL / Con-ReCall are on."""
    members = pool * (1 - population) / 2
    train_tokens = models * members * epochs * tokens
    query_tokens = models * pool * tokens
    # a prefix query forwards prefix + text per text (no prefix cache)
    prefix_tokens = 2 * models * pool * (prefix_texts + 1) * tokens
    flop_per_token = 2 * rates["parameters"]  # forward, incl. the LM head
    cpu = {"train_cpu_hours": train_tokens / rates["lora_train_tokens_per_cpu_s"] / 3600,
           "query_cpu_hours": query_tokens / rates["query_tokens_per_cpu_s"] / 3600,
           "prefix_queries_cpu_hours": prefix_tokens / rates["query_tokens_per_cpu_s"] / 3600}
    # GPU ESTIMATE: H100/H200 dense BF16 peak 989 TFLOP/s, at an assumed 25% utilization for
    # a 124M model on 128-token texts; LoRA training = forward + activation gradients
    # (about 2 forwards; the adapters' weight gradients are negligible)
    effective = 0.25 * 989e12
    gpu = {"train_gpu_minutes": train_tokens * 2 * flop_per_token / effective / 60,
           "query_gpu_minutes": query_tokens * flop_per_token / effective / 60,
           "prefix_queries_gpu_minutes": prefix_tokens * flop_per_token / effective / 60,
           "assumption": "ESTIMATE, not measured: 25% of 989 TFLOP/s (H100/H200 BF16 dense)"}
    return {"train_tokens": train_tokens, "query_tokens": query_tokens,
            "prefix_query_tokens": prefix_tokens, "cpu_one_thread": cpu, "gpu": gpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--big-texts", type=int, default=4)
    parser.add_argument("--out", type=Path,
                        default=Path("benchmarks/results/text_throughput.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    record = {"tiny_gpt2": tiny(args, 49), "tiny_gpt2_257": tiny(args, 257),
              "gpt2_124m": gpt2_124m(args)}
    record["family_16x20k"] = family_cost(record["gpt2_124m"])
    args.out.write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
