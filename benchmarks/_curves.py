"""Learning curves over seeds, for the RL benchmarks (not a benchmark itself).

``draw(ax, curves, window, budget, ...)`` draws, on a matplotlib axis, each seed's
running mean of ``window`` episode returns (grey, until the seed stops) and their mean
over seeds with the 25-75th percentile band. A seed that stopped early (solved) carries
its last running mean to the end of the budget, so the mean is over all seeds at every
episode.
"""
from __future__ import annotations

import numpy as np


def draw(ax, curves: list, window: int, budget: int, target: float, ylabel: str, title: str) -> None:
    grid = np.arange(window, budget + 1)
    rows = []
    for r in curves:
        if len(r) < window:
            continue
        run = np.convolve(np.asarray(r, float), np.ones(window) / window, "valid")  # episodes window..len
        full = np.concatenate([run, np.full(max(0, len(grid) - len(run)), run[-1])])
        rows.append(full[: len(grid)])
        ax.plot(np.arange(window, window + len(run)), run, color="grey", lw=0.5, alpha=0.5)
    if rows:
        rows = np.array(rows)
        ax.plot(grid, rows.mean(0), color="C0", lw=2, label=f"mean over {len(rows)} seeds")
        ax.fill_between(grid, np.percentile(rows, 25, 0), np.percentile(rows, 75, 0), color="C0", alpha=0.2,
                        label="25-75th percentile")
    last = max((len(r) for r in curves), default=budget)
    ax.set_xlim(window, min(budget, last + 20))
    ax.axhline(target, color="k", lw=0.5, ls="--")
    ax.set_xlabel("episode")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=7)


def save(fig, path: str, note: str) -> None:
    fig.text(0.01, 0.01, note, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
