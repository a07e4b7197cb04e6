"""Optional terms of mini-wan's expert loss that aim at the direction word (off in the committed recipe).

The committed high-noise expert reads the colour word and ignores the direction word (``caption_preference``
ratio 1.000, docs/zoo.md), though a run of the same recipe on a VAE that differed in rounding read it: what
the direction decides is the motion between latent frames of a small ball, a small part of the plain loss.
Two terms aim at it, each switched on by a key of the recipe's ``train.expert`` section
(``mini_wan_train._train_expert``):

- ``direction_contrast`` (weight) with ``direction_margin``: the same noisy latent is predicted again under
  the caption with another direction word (``direction_swaps``), and the wrong caption's error must exceed
  the right one's by the margin in log ratio (``contrast_hinge``): the probe's ratio, made a target.
- ``temporal_weight``: the error of the frame-to-frame change of the predicted clean latent
  (``temporal_difference_error``), where motion lives.

A third key changes where on the schedule the expert learns, not the loss: ``sigma_power`` draws the expert's
time ``u`` from ``low + (high - low) r ** sigma_power`` (``r`` uniform; ``power_draw``) instead of uniformly,
so a power above 1 spends more draws at the lower sigmas of the expert's range. Near sigma 1 the MSE-optimal
prediction is the conditional mean, which on the world's torus (the ball starts anywhere) carries no
direction: only draws where the noisy latent still shows the ball can teach the direction word.
"""

from __future__ import annotations

import math
import re

import torch

from accel.zoo.video_world import DIRECTIONS

_DIRECTION_WORD = re.compile(r"\b(" + "|".join(DIRECTIONS) + r")\b")


def direction_swaps(captions: list[str]) -> torch.Tensor:
    """For each caption, the indices (into ``captions``) of the same caption with another direction word.

    Returns a ``len(captions) x (len(DIRECTIONS) - 1)`` long tensor, padded with -1 where a swap is not among
    ``captions`` (a held-out combination, or a caption without a direction word such as the empty one): the
    contrast never shows the expert a held-out caption, not even as a negative.
    """
    position = {caption: i for i, caption in enumerate(captions)}
    table = torch.full((len(captions), len(DIRECTIONS) - 1), -1, dtype=torch.long)
    for row, caption in enumerate(captions):
        words = _DIRECTION_WORD.findall(caption)
        if len(words) != 1:
            continue
        swaps = [_DIRECTION_WORD.sub(other, caption) for other in DIRECTIONS if other != words[0]]
        found = [position[s] for s in swaps if s in position]
        table[row, : len(found)] = torch.tensor(found, dtype=torch.long)
    return table


def pick_swaps(table: torch.Tensor, which: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One random entry of ``table``'s row for each caption index in ``which``; -1 where the row has none."""
    rows = table[which]
    counts = (rows >= 0).sum(dim=1)
    draw = (torch.rand(len(which), generator=generator) * counts.clamp(min=1)).long()
    picked = rows.gather(1, draw[:, None])[:, 0]
    return torch.where(counts > 0, picked, torch.full_like(picked, -1))


def weighted_row_error(prediction: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each batch row's weighted mean squared error (``weights`` broadcast over the channels), one value a row."""
    weights = weights.expand_as(prediction)
    dims = tuple(range(1, prediction.ndim))
    return (weights * (prediction - target) ** 2).sum(dim=dims) / weights.sum(dim=dims)


def contrast_hinge(right: torch.Tensor, wrong: torch.Tensor, margin: float) -> torch.Tensor:
    """Mean over rows of ``max(0, log(1 + margin) - log(wrong / right))``: zero once every row's wrong caption
    errs ``1 + margin`` times as much as its right one, the ratio ``caption_preference`` reads."""
    if margin <= 0:
        raise ValueError(f"direction_margin {margin}: expected a positive margin (0.1 asks for a ratio of 1.1)")
    gap = torch.log(wrong) - torch.log(right)
    return torch.relu(math.log1p(margin) - gap).mean()


def predicted_x0(noisy: torch.Tensor, velocity: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """The clean latent a velocity prediction implies: ``noisy - sigma * velocity`` (rectified flow)."""
    return noisy - sigma.reshape(-1, *([1] * (noisy.ndim - 1))) * velocity


def temporal_difference_error(predicted: torch.Tensor, x0: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted mean squared error of the frame-to-frame change (dim 2, N x C x F x H x W) of ``predicted``
    against ``x0``'s; a change counts with the larger weight of its two frames."""
    change = predicted.diff(dim=2) - x0.diff(dim=2)
    pair = torch.maximum(weights[:, :, 1:], weights[:, :, :-1]).expand_as(change)
    return (pair * change**2).sum() / pair.sum()


def power_draw(draw: torch.Tensor, power: float) -> torch.Tensor:
    """``draw ** power`` for uniform draws in [0, 1]: above 1 the result leans towards 0 (P(< q) = q ** (1 / power))."""
    if power <= 0:
        raise ValueError(f"sigma_power {power}: expected a positive power (1 is the uniform draw, 2 leans low)")
    return draw**power
