"""`mgrpo bench weights`: weight sync, learner to engine, as full snapshots and as deltas (docs/architecture.md
§Weights: full snapshots and deltas).

SmolLM2-135M (`--quick`: tiny:main) at two versions one real AdamW step apart (lr 1e-6, a forward and
backward on a small batch of random tokens). For each wire dtype (fp32, bf16) and each transport (the
object store of an embedded nats-server, a shared directory): the learner writes version 1 (a full
snapshot) and version 2 (a delta against it), publishes each, and an hf engine in the wire dtype fetches and
loads it; the engine's weights are then checked bit for bit against the learner's. Reported per row: MB on
the wire, milliseconds writing (the delta computed, the file written), publishing, fetching and loading, and
all of it per MB of the model in that dtype; for the delta the fraction of elements that changed. Repeated
(`--quick`: once), the median kept. Compare within one run: the machine is shared.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from mgrpo_actors.config.learner import WeightsConfig
from mgrpo_actors.engines.hf import HFEngine
from mgrpo_actors.models.loader import load_model
from mgrpo_actors.runtime import Bus, EmbeddedNats
from mgrpo_actors.weights.encoder import WeightsEncoder
from mgrpo_actors.weights.files import tied_aliases
from mgrpo_actors.weights.store import WeightsStore
from mgrpo_actors.weights.sync import PolicySync, latest_key

__all__ = ["run", "two_versions"]

LR = 1e-6
TRANSPORTS = ("object-store", "directory")
DTYPES = ("float32", "bfloat16")
STAGES = ("write", "publish", "fetch", "load")


def two_versions(spec: str, batch: int, tokens: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], Any]:
    """(weights before, weights after) one AdamW step at LR on `batch` x `tokens` random tokens (fp32), and the
    model (its weights: the second)."""
    model, _ = load_model(spec)
    model.train()
    before = {name: t.detach().clone() for name, t in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    ids = torch.randint(0, model.config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del optimizer
    model.eval()
    return before, {name: t.detach() for name, t in model.state_dict().items()}, model


class _TimedStore(WeightsStore):
    """A WeightsStore that adds up the seconds its fetches take."""

    fetch_s = 0.0

    def fetch_version(self, announced, version, sha256):  # noqa: ANN001, ANN201
        start = time.perf_counter()
        try:
            return super().fetch_version(announced, version, sha256)
        finally:
            self.fetch_s += time.perf_counter() - start


def _bit_identical(engine: HFEngine, wire: dict[str, torch.Tensor]) -> bool:
    held = engine.model.state_dict()
    kind = {2: torch.int16, 4: torch.int32}
    return all(
        held[n].dtype == t.dtype and torch.equal(held[n].view(kind[t.element_size()]), t.view(kind[t.element_size()]))
        for n, t in wire.items()
    )


def _measure(
    url: str, spec: str, versions: list[dict[str, torch.Tensor]], skip: set[str], dtype: str, transport: str, n: int
) -> tuple[list[dict[str, Any]], bool]:
    """Rows (full, delta) of one wire dtype and transport, medians of `n` rounds; whether the engine ended
    bit-identical every time."""
    root = Path(tempfile.mkdtemp(prefix="mgrpo-bench-weights-"))
    cfg = WeightsConfig(transport=transport, directory=str(root / "shared"), full_every=10, keep_versions=2)
    bus = Bus(url, run_id=f"bench-weights-{dtype[:4]}-{transport[:3]}", node="bench").connect()
    model, tokenizer = load_model(spec, dtype=getattr(torch, dtype))
    engine = HFEngine(model, tokenizer)
    learner = WeightsStore(bus, "main", cfg, root / "learner")
    store = _TimedStore(bus, "main", cfg, root / "engine")
    sync, kv = PolicySync(bus, "main", engine, store), bus.kv(bus.subjects.bucket("versions-main"))
    samples: dict[str, list[dict[str, float]]] = {"full": [], "delta": []}
    identical, version = True, 0
    try:
        for _ in range(n):
            encoder = WeightsEncoder(getattr(torch, dtype), cfg.full_every, skip)  # a new learner: full first
            for kind, state in zip(("full", "delta"), versions, strict=True):
                version += 1
                start = time.perf_counter()
                written = encoder.write(state, version, root / "learner" / f"v{version}.safetensors")
                wrote = time.perf_counter()
                announced = learner.publish(written.path, version, version, base=written.base, sha256=written.sha256)
                kv.put(latest_key("main"), announced)
                published = time.perf_counter()
                store.fetch_s = 0.0
                assert sync.load(announced) and (written.base is None) == (kind == "full")
                loaded = time.perf_counter()
                identical &= _bit_identical(engine, encoder.last)
                samples[kind].append(
                    {
                        "write": wrote - start,
                        "publish": published - wrote,
                        "fetch": store.fetch_s,
                        "load": loaded - published - store.fetch_s,
                        "mb": written.nbytes / 1e6,
                        "changed": written.changed / written.elements,
                    }
                )
    finally:
        bus.close()
    model_mb = sum(t.numel() for t in encoder.last.values()) * getattr(torch, dtype).itemsize / 1e6
    rows = []
    for kind, runs in samples.items():
        row: dict[str, Any] = {"wire": dtype, "transport": transport, "kind": kind, "model_mb": model_mb}
        for key in (*STAGES, "mb", "changed"):
            row[key] = statistics.median(r[key] for r in runs)
        total = sum(row[stage] for stage in STAGES)
        row |= {"total_s": total, "ms_per_mb": total * 1e3 / model_mb}
        rows.append(row)
    return rows, identical


def run(quick: bool = False) -> dict[str, Any]:
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # no "Loading weights" bars between the rows
    spec = "tiny:main" if quick else "smollm2"
    before, after, model = two_versions(spec, batch=2, tokens=16 if quick else 64)
    skip = tied_aliases(model)
    del model
    rows, identical = [], True
    with EmbeddedNats() as server:
        for dtype in DTYPES:
            for transport in TRANSPORTS:
                measured, same = _measure(server.url, spec, [before, after], skip, dtype, transport, 1 if quick else 3)
                rows += measured
                identical &= same
    results = {"model": spec, "quick": quick, "lr": LR, "rows": rows, "bit_identical": identical}
    _print(results)
    return results


def _print(results: dict[str, Any]) -> None:
    table = Table(
        title=f"weight sync, {results['model']}: two versions one AdamW step apart (lr {results['lr']:g}), "
        "milliseconds; ms/MB per MB of the model in the wire dtype"
    )
    for column in ("wire", "via", "version", "MB", "changed", *STAGES, "ms/MB"):
        table.add_column(column, justify="left" if column in ("wire", "via", "version") else "right")
    for row in results["rows"]:
        table.add_row(
            "bf16" if row["wire"] == "bfloat16" else "fp32",
            "store" if row["transport"] == "object-store" else "dir",
            row["kind"],
            f"{row['mb']:,.2f}",
            f"{row['changed']:.2%}",
            *(f"{row[stage] * 1e3:,.1f}" for stage in STAGES),
            f"{row['ms_per_mb']:.3f}",
        )
    console = Console(width=max(Console().width, 100))
    console.print(table)
    console.print(
        f"engine weights bit-identical to the learner's wire weights: {'yes' if results['bit_identical'] else 'NO'}"
    )
