"""mini-flux's transformer objective: rectified flow's noising and velocity target, model guidance, the EMA.

The arithmetic the transformer stage of ``accel.zoo.mini_flux_train`` learns against, as public functions so
tests can check it against ``FlowMatchEulerDiscreteScheduler`` and that training calls exactly these.
"""

from __future__ import annotations

import torch


def model_guidance_target(
    target: torch.Tensor, captioned: torch.Tensor, uncaptioned: torch.Tensor, dropped: torch.Tensor, weight: float
) -> torch.Tensor:
    """The rectified-flow target with model guidance (Tang et al. 2025, "Diffusion Models without CFG").

    A captioned sample's target ``noise - x0`` leans by ``weight`` times the model's own captioned minus
    uncaptioned velocity (both without gradient); a sample whose caption was dropped keeps the plain target,
    so the uncaptioned velocity stays the data's. The fixed point is ``u + (v - u) / (1 - weight)``: one
    captioned pass draws what true classifier-free guidance at scale ``1 / (1 - weight)`` draws.
    """
    lean = (captioned - uncaptioned) * _per_row((~dropped).to(target.dtype), target)
    return target + weight * lean


def _per_row(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """One value per batch row, shaped to broadcast over ``like`` (packed image tokens or 5-D video latents)."""
    return values.reshape(-1, *([1] * (like.ndim - 1)))


def noised_sample(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Rectified flow's sample at time ``t`` (one per batch row): the straight line ``(1 - t) x0 + t noise``.

    ``t`` is the flow-match scheduler's sigma (FluxPipeline passes the transformer ``timestep / 1000``, that
    sigma): 0 is the data, 1 pure noise.
    """
    t = _per_row(t, x0)
    return (1 - t) * x0 + t * noise


def velocity_target(x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The velocity the transformer learns, ``noise - x0``: d/dt of ``noised_sample``, as the Euler step reads it."""
    return noise - x0


def ema_decay(step: int, ema: float) -> float:
    """The EMA's decay after training step ``step`` (from 0): ``(1 + step) / (10 + step)``, at most ``ema``."""
    return min(ema, (1 + step) / (10 + step))


@torch.no_grad()
def ema_update(ema: dict[str, torch.Tensor], state: dict[str, torch.Tensor], decay: float) -> None:
    """Move the EMA weights toward the model's ``state`` in place: ``decay * ema + (1 - decay) * state``.

    Entries that are not floating point (integer buffers) are copied.
    """
    for key, value in state.items():
        if value.dtype.is_floating_point:
            ema[key].mul_(decay).add_(value.detach(), alpha=1 - decay)
        else:
            ema[key].copy_(value)
