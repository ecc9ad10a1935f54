"""Does reporting a CUDA loss every step stall the GPU? Four variants of one training loop.

A small transformer (bf16 autocast, AdamW, one GPU, a few hundred steps of
about 10 ms) trained in four variants, in the order A B C D D C B A (so drift
falls on all alike), each for ``--steps`` steps per round:

- ``none``: no reporting;
- ``item``: ``loss.item()`` and ``grad_norm.item()`` every step (what users do);
- ``trainreport (item)``: ``report_train_step`` with the tensors, the library
  forced onto its earlier path, ``.item()`` on the caller's thread (what
  trainreport did before docs/design.md#device-values: the benchmark turns off
  ``is_device_scalar`` where ``trainreport._record._reports`` calls it: the one test of that rule);
- ``trainreport``: ``report_train_step`` with the tensors, as shipped (copied
  off the device without a sync).

Per variant: step time on the GPU's timeline (an event recorded at each
step's start; median and p99 of the gaps, ms), the wall time per step, GPU
utilisation (NVML, sampled every 50 ms, when ``nvidia-ml-py`` is installed),
the CPU's lead (how many earlier steps are still unfinished on the GPU when
the CPU starts enqueueing the next one: median and mean), and for the
trainreport variants the recorded values against the true ones (every step's
loss kept on the device and read at the end; the largest difference).

Run (a machine with a CUDA GPU; a few minutes at most):

    python benchmarks/bench_gpu_sync.py              # 300 steps a variant and round
    python benchmarks/bench_gpu_sync.py --steps 100 --d-model 512

Without CUDA it prints why nothing was measured and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

VARIANTS = ("none", "item", "trainreport (item)", "trainreport")
NO_CUDA = (
    "bench_gpu_sync: no CUDA device here (torch.cuda.is_available() is False): nothing measured"
)


def _cuda_torch() -> Any | None:
    """torch, when it is installed and sees a CUDA device; else None."""
    try:
        import torch  # noqa: PLC0415 - optional: without it nothing is measured
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


class _Utilisation:
    """Samples the GPU's utilisation (NVML) every 50 ms on a thread of its own, while entered."""

    def __init__(self, index: int) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._handle: Any = None
        try:
            import pynvml  # noqa: PLC0415 - optional (nvidia-ml-py)

            pynvml.nvmlInit()
            self._nvml: Any = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # no nvidia-ml-py, or no NVML: utilisation is not reported
            self._nvml = None

    def __enter__(self) -> _Utilisation:
        if self._handle is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._handle is not None:
            self._thread.join()

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def build(torch: Any, d_model: int, layers: int, seq: int, batch: int) -> tuple[Any, ...]:
    """The model, its optimizer and one fixed batch (tokens and targets) on the GPU."""
    torch.manual_seed(0)
    vocab = 8192
    nn = torch.nn

    class Model(nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model)
            layer = nn.TransformerEncoderLayer(
                d_model,
                nhead=max(1, d_model // 64),
                dim_feedforward=4 * d_model,
                batch_first=True,
                norm_first=True,
                dropout=0.0,
            )
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, vocab)

        def forward(self, tokens: Any) -> Any:
            return self.head(self.encoder(self.embed(tokens), is_causal=False))

    model = Model().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, vocab, (batch, seq), device="cuda")
    targets = torch.randint(0, vocab, (batch, seq), device="cuda")
    return model, optimizer, tokens, targets


def train_step(
    torch: Any, model: Any, optimizer: Any, tokens: Any, targets: Any
) -> tuple[Any, Any]:
    """One optimizer step; returns (loss, grad_norm) as 0-d CUDA tensors (no sync)."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm


def run_variant(
    torch: Any, variant: str, parts: tuple[Any, ...], steps: int, first_step: int
) -> dict[str, Any]:
    """Train ``steps`` steps in ``variant``; return its measurements."""
    from trainreport import MemorySink, Reporter, ReportingConfig  # noqa: PLC0415 - after sys.path points at this checkout
    from trainreport._record import _reports  # noqa: PLC0415 - after sys.path points at this checkout

    model, optimizer, tokens, targets = parts
    truth = torch.zeros(steps, device="cuda", dtype=torch.float64)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    ends = [torch.cuda.Event() for _ in range(steps)]
    leads: list[int] = []
    sink = MemorySink()
    reporter = None
    rule = _reports.is_device_scalar  # type: ignore[attr-defined]
    if variant.startswith("trainreport"):
        if variant == "trainreport (item)":
            _reports.is_device_scalar = lambda value: False  # type: ignore[attr-defined]  # .item() at the call
        reporter = Reporter(sink, ReportingConfig(), rank=0).start()
    items: list[tuple[float, float]] = []
    torch.cuda.synchronize()
    try:
        with _Utilisation(torch.cuda.current_device()) as utilisation:
            wall0 = time.perf_counter()
            for i in range(steps):
                leads.append(sum(1 for e in ends[max(0, i - 64) : i] if not e.query()))
                starts[i].record()
                loss, grad_norm = train_step(torch, model, optimizer, tokens, targets)
                truth[i] = loss.detach()
                if variant == "item":
                    items.append((loss.item(), grad_norm.item()))
                elif reporter is not None:
                    reporter.report_train_step(
                        step=first_step + i, metrics={"loss": loss, "grad_norm": grad_norm}
                    )
                ends[i].record()
            starts[steps].record()
            torch.cuda.synchronize()
            wall = time.perf_counter() - wall0
        if reporter is not None:
            reporter.report_completed()
            reporter.close(timeout=30)
    finally:
        _reports.is_device_scalar = rule  # type: ignore[attr-defined]
    gaps = sorted(starts[i].elapsed_time(starts[i + 1]) for i in range(steps))
    result: dict[str, Any] = {
        "variant": variant,
        "median_ms": statistics.median(gaps),
        "p99_ms": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))],
        "wall_ms": 1000 * wall / steps,
        "gpu_util": utilisation.mean,
        "lead_median": statistics.median(leads[5:]),
        "lead_mean": statistics.fmean(leads[5:]),
        "max_error": None,
    }
    if reporter is not None:
        task = sink.task or {}
        points = task.get("status_details", {}).get("metrics", {}).get("train_loss", [])
        recorded = {p["step"]: p["value"] for p in points}
        true = truth.tolist()
        errors = [
            abs(recorded[first_step + i] - true[i]) if first_step + i in recorded else float("inf")
            for i in range(steps)
        ]
        result["max_error"] = max(errors)
        result["recorded"] = len(recorded)
    return result


def combine(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One variant's rounds folded into one row (means of the rounds)."""
    row: dict[str, Any] = {"variant": results[0]["variant"]}
    for key in ("median_ms", "p99_ms", "wall_ms", "gpu_util", "lead_median", "lead_mean"):
        values = [r[key] for r in results if r[key] is not None]
        row[key] = statistics.fmean(values) if values else None
    errors = [r["max_error"] for r in results if r["max_error"] is not None]
    row["max_error"] = max(errors) if errors else None
    return row


def table(rows: Sequence[dict[str, Any]]) -> str:
    base = rows[0]["median_ms"]

    def cell(value: float | None, form: str) -> str:
        return "-" if value is None else format(value, form)

    lines = [
        "| variant | step median ms | vs none | step p99 ms | wall ms/step | GPU util % "
        "| CPU lead (median, mean steps) | max recorded error |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        slower = 100 * (row["median_ms"] / base - 1)
        lead = f"{row['lead_median']:.0f}, {row['lead_mean']:.1f}"
        lines.append(
            f"| {row['variant']} | {row['median_ms']:.3f} | {slower:+.1f} % "
            f"| {row['p99_ms']:.3f} | {row['wall_ms']:.3f} | {cell(row['gpu_util'], '.0f')} "
            f"| {lead} | {cell(row['max_error'], '.3g')} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per variant and round")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    torch = _cuda_torch()
    if torch is None:
        out(NO_CUDA)
        return 0
    parts = build(torch, args.d_model, args.layers, args.seq, args.batch)
    for _ in range(args.warmup):
        train_step(torch, *parts)
    torch.cuda.synchronize()
    out(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args}")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    step = 1
    for variant in (*VARIANTS, *reversed(VARIANTS)):
        results[variant].append(run_variant(torch, variant, parts, args.steps, step))
        step += args.steps
    out(table([combine(results[v]) for v in VARIANTS]))
    return 0


def test_exits_cleanly_without_cuda_or_measures_a_few_steps() -> None:
    """Without CUDA: the message and 0. With CUDA: a very short run prints the table."""
    lines: list[str] = []
    argv = ["--steps", "10", "--warmup", "2", "--d-model", "64", "--layers", "1", "--seq", "16"]
    assert main(argv, out=lines.append) == 0
    assert lines == [NO_CUDA] if _cuda_torch() is None else "| trainreport |" in lines[-1]


if __name__ == "__main__":
    sys.exit(main())
