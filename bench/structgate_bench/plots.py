"""PNG plots of benchmark results (matplotlib, Agg backend).

:func:`plot_bench`: one figure, three panels — CDF of mask time per backend (log x), CDF of compile
time per backend (log x), and a grouped bar chart of passing per split (fraction of the split's
schemas/patterns, the count written on each bar's axis label).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["plot_bench", "cdf_points"]


def cdf_points(values, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """``(x, F(x))`` of the empirical CDF, subsampled to at most ``max_points`` quantiles."""
    a = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if a.size == 0:
        return a, a
    if a.size > max_points:
        q = np.linspace(0, 1, max_points)
        idx = np.minimum((q * (a.size - 1)).round().astype(np.int64), a.size - 1)
        return a[idx], (idx + 1) / a.size
    return a, np.arange(1, a.size + 1) / a.size


def plot_bench(path: str | Path, samples: dict[str, tuple[np.ndarray, np.ndarray]], split_passing: dict[str, dict[str, tuple[int, int]]],
               title: str, *, timeout_us: float | None = None, unit_label: str = "schemas") -> Path:
    """Write the three-panel PNG.

    Parameters
    ----------
    path : output ``.png``
    samples : ``{backend: (ttfm_us, tbm_us)}``
    split_passing : ``{backend: {split: (passing, total)}}``
    title : figure title (put tokenizer, machine and date here)
    timeout_us : draw the time limit on the compile-time panel
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(samples)
    colors = {n: plt.cm.tab10(i % 10) for i, n in enumerate(names)}
    fig = plt.figure(figsize=(14, 10), constrained_layout=True)
    gs = fig.add_gridspec(2, 2, height_ratios=[1, 1.1])
    ax_m, ax_c, ax_b = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, :])
    for ax, idx, label in ((ax_m, 1, "time per mask (fill + advance), µs"), (ax_c, 0, "compile time (TTFM), µs")):
        for n in names:
            x, y = cdf_points(samples[n][idx])
            if x.size:
                ax.step(np.maximum(x, 1e-2), y, where="post", label=f"{n} (n={samples[n][idx].size:,})", color=colors[n])
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction ≤ x")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    ax_m.set_title("CDF of mask time per backend")
    ax_c.set_title("CDF of compile time per backend")
    if timeout_us:
        ax_c.axvline(timeout_us, color="grey", ls="--", lw=1)
        ax_c.text(timeout_us, 0.02, " limit", color="grey", fontsize=8)
    splits = sorted({s for d in split_passing.values() for s in d})
    if splits and names:
        w = 0.8 / len(names)
        xs = np.arange(len(splits))
        for i, n in enumerate(names):
            vals = [split_passing.get(n, {}).get(s, (0, 0)) for s in splits]
            frac = [p / t if t else 0.0 for p, t in vals]
            ax_b.bar(xs + (i - (len(names) - 1) / 2) * w, frac, w, label=n, color=colors[n])
        totals = [max((split_passing.get(n, {}).get(s, (0, 0))[1] for n in names), default=0) for s in splits]
        ax_b.set_xticks(xs, [f"{s}\n({t})" for s, t in zip(splits, totals)], rotation=35, ha="right", fontsize=8)
        ax_b.set_ylabel(f"fraction of {unit_label} passing")
        ax_b.set_ylim(0, 1.18)
        ax_b.set_yticks(np.linspace(0, 1, 6))
        ax_b.set_title(f"{unit_label.capitalize()} passing per split (count of {unit_label} in brackets)")
        ax_b.legend(fontsize=8, ncols=min(4, len(names)), loc="upper center")
        ax_b.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=11)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
