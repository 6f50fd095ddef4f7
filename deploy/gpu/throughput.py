"""Rollout tokens/s of the vllm engine beside vLLM alone on the same GPU (deploy/gpu/check.sh runs it).

Same model, prompts (chat-formatted questions repeated to fill the batch), max_new_tokens and seeds on both
sides. `engine`: VLLMEngine.generate (behaviour logprobs, our stop ids, top-k/top-p by our logits processor).
`vllm`: the engine's own `vllm.LLM` called directly with vLLM's own top-k/top-p and no logprobs, so the gap is
what the engine adds. Generated tokens over each call's wall time, median of repeats, one JSON line per
setting. Run as `python deploy/gpu/throughput.py --model smollm2 --device cuda`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from mgrpo_actors.engines import EngineConfig, SamplingParams, make_engine
from mgrpo_actors.models.loader import load_tokenizer, resolve_model_dir

QUESTIONS = (
    "Who founded the oldest museum of the capital city?",
    "Which river runs through the city where the author of the first book was born?",
    "What is the population of the largest island in the north?",
    "Name the university the painter studied at, and the year it was founded.",
)


def _prompts(tokenizer, batch: int) -> list[list[int]]:
    rendered = []
    for question in QUESTIONS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
        rendered.append(list(ids if isinstance(ids, list) else ids["input_ids"]))
    return [rendered[i % len(rendered)] for i in range(batch)]


def _timed(call) -> tuple[float, int]:
    started = time.perf_counter()
    tokens = call()
    return time.perf_counter() - started, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batches", default="1,32,256")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(model_dir)
    cfg = EngineConfig(device=args.device, dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization)
    engine = make_engine("vllm", model_dir, tokenizer, cfg)
    vllm = engine._vllm
    for top_k in (0, 50):
        params = SamplingParams(temperature=1.0, top_k=top_k, top_p=0.95, max_new_tokens=args.max_new_tokens, seed=0)
        for batch in (int(b) for b in args.batches.split(",")):
            prompts = _prompts(tokenizer, batch)
            plain = [
                vllm.SamplingParams(
                    temperature=1.0,
                    top_k=top_k,
                    top_p=0.95,
                    max_tokens=args.max_new_tokens,
                    seed=i,
                    stop_token_ids=sorted(engine.eos_token_ids),
                    detokenize=False,
                )
                for i in range(batch)
            ]
            requests = [{"prompt_token_ids": p} for p in prompts]

            def ours(prompts=prompts, params=params) -> int:
                return sum(len(g.token_ids) for g in engine.generate(prompts, params))

            def alone(requests=requests, plain=plain) -> int:
                outputs = engine.llm.generate(requests, plain, use_tqdm=False)
                return sum(len(o.outputs[0].token_ids) for o in outputs)

            ours(), alone()  # warm-up (CUDA graphs, compile)
            rates: dict[str, list[float]] = {"engine": [], "vllm": []}
            for repeat in range(args.repeats):
                for side, call in (("engine", ours), ("vllm", alone))[:: 1 if repeat % 2 == 0 else -1]:
                    seconds, tokens = _timed(call)
                    rates[side].append(tokens / seconds)
            row = {side: round(statistics.median(values), 1) for side, values in rates.items()}
            row.update(batch=batch, top_k=top_k, top_p=0.95, max_new_tokens=args.max_new_tokens, model=args.model)
            row["engine_over_vllm"] = round(row["engine"] / row["vllm"], 3)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
