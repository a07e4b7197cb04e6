"""mini-wan's training: the data, the text, VAE and two expert stages, and ``train``, which writes weights and manifest.

First the UMT5 encoder learns to tag each caption word's role (the stand-in for its language pretraining:
Wan's cross-attention gives text tokens no position, so a random encoder's "red ball on blue" and "blue ball
on red" are the same set of vectors), then it is frozen. Then the causal video VAE learns reconstruction
(mini-flux's VAE stage, on 32x32 crops: single frames, then 5-frame clips, then whole 9-frame videos), then each
expert learns rectified flow (it predicts ``noise - x0``) on its own part of the noise schedule: ``transformer``
where the pipeline calls it (timestep ``>= boundary_ratio * 1000``), ``transformer_2`` below. Times are drawn as
the inference schedule spends its steps (uniform before Wan's time shift). Beside the experts, when the recipe has
``train.vae_decoder``, the VAE's decoder alone fine-tunes on whole videos (its encoder, hence every latent, frozen).
The loop machinery (thread picking, log, schedule, EMA) is mini-flux's; its log names the VAE stages ``vae`` (single
frames first, whole videos next, the decoder alone last).
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accel.zoo.mini_flux_loop import ThreadPicker, TrainLog, _begin_step, _loop, _thread_candidates, usable_cores
from accel.zoo.mini_flux_model import LOG_FILE
from accel.zoo.mini_flux_objective import ema_decay, ema_update, noised_sample, velocity_target
from accel.zoo.mini_flux_train import _encode_latents, _train_vae
from accel.zoo.mini_wan_model import COMPONENT_FILES, MAX_SEQUENCE_LENGTH, MINI_WAN_CONFIG, build_components
from accel.zoo.mini_wan_objective import (
    contrast_hinge,
    direction_swaps,
    pick_swaps,
    power_draw,
    predicted_x0,
    temporal_difference_error,
    weighted_row_error,
)
from accel.zoo.trained_weights import write_weights
from accel.zoo.video_world import (
    DIRECTIONS,
    HELD_OUT_SCENES,
    TEMPLATES,
    WORLD_VERSION,
    VideoScene,
    render_array,
    training_scenes,
)
from accel.zoo.world import PALETTE

NAME = "mini-wan"
# The experts' seeds are tiny-wan22's (``build_wan22``): transformer 0, transformer_2 4.
EXPERTS = ("transformer", "transformer_2")


def make_dataset(count: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """``count`` training videos (float32, [-1, 1], N x C x F x H x W) of held-in scenes with random captions."""
    rng = np.random.default_rng(seed)
    scenes = training_scenes()
    picks = rng.integers(0, len(scenes), size=count)
    templates = rng.integers(0, len(TEMPLATES), size=count)
    first = render_array(scenes[0])
    videos = np.empty((count, *first.shape), dtype=np.float32)
    captions = []
    for index in range(count):
        scene = scenes[int(picks[index])]
        videos[index] = render_array(scene, seed=seed * 1_000_003 + index)
        captions.append(scene.caption(int(templates[index])))
    return videos, captions


def word_roles() -> list[str]:
    """The tags of the text stage: ``other`` and each (role, value) a caption word can have."""
    return [
        "other",
        *(f"background:{c}" for c in PALETTE),
        *(f"colour:{c}" for c in PALETTE),
        *(f"direction:{d}" for d in DIRECTIONS),
    ]


def caption_tags(scene: VideoScene, template: int) -> list[str]:
    """The role tag of each word (and comma) of ``scene.caption(template)``, in order."""
    text = TEMPLATES[template % len(TEMPLATES)]
    tags = []
    for word in re.findall(r"\{[a-z]+\}|[a-z]+|,", text):
        role = word.strip("{}") if word.startswith("{") else None
        tags.append("other" if role is None else f"{role}:{getattr(scene, role)}")
    return tags


def _train_text_encoder(
    components: dict[str, Any],
    cfg: dict[str, Any],
    generator: torch.Generator,
    picker: ThreadPicker,
    log: TrainLog,
    progress: bool,
) -> dict[str, Any]:
    """Teach the random UMT5 to tag each word's role through a linear head thrown away afterwards; freeze it."""
    encoder, tokenizer = components["text_encoder"], components["tokenizer"]
    roles = word_roles()

    def encode(scenes: list[VideoScene]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pairs = [(scene, t) for scene in scenes for t in range(len(TEMPLATES))]
        tokens = tokenizer(
            [scene.caption(t) for scene, t in pairs],
            padding="max_length",
            max_length=MAX_SEQUENCE_LENGTH,
            truncation=True,
            return_tensors="pt",
        )
        targets = torch.full(tokens.input_ids.shape, -100)
        for row, (scene, t) in enumerate(pairs):
            tags = caption_tags(scene, t)
            if int(tokens.attention_mask[row].sum()) != len(tags) + 1:  # the words, then end-of-sequence
                raise RuntimeError(f"{scene.caption(t)!r}: the tokenizer does not give one token per word")
            targets[row, : len(tags)] = torch.tensor([roles.index(tag) for tag in tags])
        return tokens.input_ids, tokens.attention_mask, targets

    ids, mask, targets = encode(training_scenes())
    head = torch.nn.Linear(encoder.config.d_model, len(roles))
    params = [*encoder.parameters(), *head.parameters()]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=0.0)
    encoder.train()

    def step_fn(step: int) -> float:
        index = _begin_step(optimizer, step, cfg, ids.shape[0], generator)
        hidden = encoder(ids[index], attention_mask=mask[index]).last_hidden_state
        loss = torch.nn.functional.cross_entropy(head(hidden).flatten(0, 1), targets[index].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    result: dict[str, Any] = _loop("text", cfg["steps"], step_fn, picker, log, progress, NAME)
    encoder.eval()
    for p in encoder.parameters():
        p.requires_grad_(False)
    ids, mask, targets = encode(list(HELD_OUT_SCENES))
    with torch.no_grad():
        predicted = head(encoder(ids, attention_mask=mask).last_hidden_state).argmax(-1)
    right = ((predicted == targets) | (targets == -100)).all(dim=1)
    result["held_out_accuracy"] = float(right.float().mean())
    log.write(f"text: held-out captions tagged right (every word): {result['held_out_accuracy']:.3f}")
    return result


# A pixel belongs to the ball when it is this far (Euclidean RGB, in the [-1, 1] units the VAE sees) from its
# frame's median colour, the background: the ball covers at most a fifth of a frame.
BALL_DISTANCE = 0.3


def ball_mask(videos: torch.Tensor) -> torch.Tensor:
    """1 where a pixel of ``videos`` (N x C x F x H x W, [-1, 1]) shows the ball, else 0 (N x 1 x F x H x W).

    The background is each frame's median colour (the ball covers at most a fifth of a frame), so the mask needs
    no rendering metadata and works on any crop that is mostly background.
    """
    background = videos.flatten(3).median(dim=3).values[..., None, None]
    distance = ((videos - background) ** 2).sum(dim=1, keepdim=True).sqrt()
    return (distance > BALL_DISTANCE).float()


def latent_ball_mask(videos: torch.Tensor, temporal: int = 4, spatial: int = 8) -> torch.Tensor:
    """``ball_mask`` on the latent grid (N x 1 x F' x H' x W'): a latent pixel is ball if any pixel it encodes is.

    Wan's causal VAE encodes the first frame alone, then each ``temporal`` frames into one latent frame, and
    ``spatial`` x ``spatial`` pixels into one latent pixel.
    """
    mask = ball_mask(videos)[:, 0]
    first, rest = mask[:, :1], mask[:, 1:]
    frames = torch.cat([first, rest.unflatten(1, (-1, temporal)).amax(dim=2)], dim=1)
    return torch.nn.functional.max_pool2d(frames, spatial)[:, None]


def ball_weighting(weight: float) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The VAE's per-pixel loss weight: 1 on the background, ``1 + weight`` on the ball (``ball_mask``); None
    (the plain mean squared error) for 0.

    The ball is a sixth of a frame at most; unweighted, a VAE that blurs its colour towards a neighbour in the
    palette loses little, and the scorer then reads the wrong colour (docs/zoo.md).
    """

    def weights(batch: torch.Tensor) -> torch.Tensor:
        return 1.0 + weight * ball_mask(batch)

    return weights if weight else None


@torch.no_grad()
def per_frame_init(vae: Any) -> Any:
    """Start the causal video VAE as an image VAE applied frame by frame; returns ``vae``.

    Every causal 3D convolution's taps on past frames start at zero (its current-frame tap keeps its random
    start), the temporal downsampling keeps the last frame of each window and the temporal upsampling repeats
    each frame. Trained first on single frames (which reach only the current-frame taps), the VAE then meets
    clips as the per-frame model it learnt, and the clip stage learns motion from there: with random past taps
    the first clips undid most of what the frames stage learnt (loss 0.04 -> 0.26, held-out PSNR 12.7 dB).
    """
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d, WanResample

    time_convs = {id(m.time_conv) for m in vae.modules() if isinstance(m, WanResample) and hasattr(m, "time_conv")}
    for module in vae.modules():
        if not isinstance(module, WanCausalConv3d) or module.kernel_size[0] == 1:
            continue
        if id(module) not in time_convs:
            module.weight[:, :, :-1] = 0
            continue
        out_channels, in_channels = module.weight.shape[:2]
        identity = torch.eye(in_channels)
        module.weight.zero_()
        if module.bias is not None:
            module.bias.zero_()
        for start in range(0, out_channels, in_channels):  # upsampling's two output frames, or one
            module.weight[start : start + in_channels, :, -1, 0, 0] = identity
    return vae


def sigma_range(expert: str, boundary_ratio: float, shift: float) -> tuple[float, float]:
    """The range of the pre-shift time ``u`` (uniform in [0, 1] over the schedule) that ``expert`` learns.

    The pipeline calls ``transformer`` while the timestep is at least ``boundary_ratio * 1000``, that is
    while the shifted sigma ``shift u / (1 + (shift - 1) u)`` is at least ``boundary_ratio``.
    """
    u_boundary = boundary_ratio / (shift - (shift - 1) * boundary_ratio)
    return (u_boundary, 1.0) if expert == "transformer" else (0.0, u_boundary)


def shifted_sigma(u: torch.Tensor, shift: float) -> torch.Tensor:
    """Wan's time shift (``FlowMatchEulerDiscreteScheduler(shift=...)``): the sigma the schedule reaches at ``u``."""
    return shift * u / (1 + (shift - 1) * u)


# The ``train.expert`` keys an expert may set apart (``expert_settings``): what its loop reads per step.
PER_EXPERT_KEYS = ("steps", "lr", "warmup", "ema", "sigma_power", "ball_weight", "empty_caption")


def expert_settings(cfg: dict[str, Any], expert: str) -> dict[str, Any]:
    """``train.expert`` as ``expert`` trains it: each ``<key>_by_expert`` that names the expert replaces ``<key>``
    (``steps_by_expert: {transformer: 22000}`` gives the high-noise expert 22000 steps), and the ``*_by_expert``
    keys themselves are dropped. The learning rate's warmup-then-cosine runs over the expert's own steps.

    The two experts learn different things at different paces: the high-noise one learns the direction word late
    (docs/zoo.md, wave 9), so the recipe gives it more steps; the low-noise one loses the direction at the top of
    its range (wave 12), so its draws lean there (wave 14). A name that is not an expert, or a ``*_by_expert`` key
    whose base key is not one of ``PER_EXPERT_KEYS`` (the settings an expert may set apart; the objective's optional
    terms, the batch and compile are shared), is an error, not a silent default.
    """
    settings = {key: value for key, value in cfg.items() if not key.endswith("_by_expert")}
    for key, by_expert in cfg.items():
        if not key.endswith("_by_expert"):
            continue
        if not isinstance(by_expert, dict):
            raise ValueError(f"train.expert.{key}: expected a mapping of expert to value, got {by_expert!r}")
        unknown = sorted(set(by_expert) - set(EXPERTS))
        if unknown:
            raise ValueError(f"train.expert.{key}: {unknown} are not experts (expected some of {EXPERTS})")
        base = key.removesuffix("_by_expert")
        if base not in PER_EXPERT_KEYS:
            raise ValueError(
                f"train.expert.{key}: {base!r} cannot differ by expert (expected one of "
                f"{', '.join(k + '_by_expert' for k in PER_EXPERT_KEYS)})"
            )
        if expert in by_expert:
            settings[base] = by_expert[expert]
    return settings


def expert_steps(cfg: dict[str, Any], expert: str) -> int:
    """The number of steps ``expert`` trains (``expert_settings``: ``steps_by_expert[expert]`` where the recipe's
    ``train.expert`` names it, else ``steps``)."""
    return int(expert_settings(cfg, expert)["steps"])


def training_forward(model: Any, compile: bool) -> Any:
    """What an expert stage calls to predict: the expert itself, or (``compile``) ``torch.compile`` of it, which
    shares its parameters, so the optimiser and the EMA see the same tensors.

    Compiled (inductor, forward and backward), a step of the expert at batch 64 on one core takes 0.068 s against
    0.103 s eager with both experts side by side, 0.062 against 0.100 alone (``benchmarks/mini_wan_step_time.py``,
    Intel Xeon, 2026-12-07): the steps are many small kernels, which inductor fuses. The first step pays the
    compile (about 25 s cold, a few with inductor's cache warm). Another float rounding than eager's, so a recipe
    with it is another draw.
    """
    return torch.compile(model) if compile else model


def inductor_graphs() -> int:
    """How many graphs inductor has compiled or taken from its cache in this process so far (dynamo's counters):
    what shows that a stage trained through inductor, not eager (another backend compiles no inductor graph)."""
    from torch._dynamo.utils import counters

    return sum(counters["inductor"][key] for key in ("fxgraph_cache_miss", "fxgraph_cache_hit", "fxgraph_cache_bypass"))


def _in_process_compile() -> Any:
    """Inductor compiling in the calling process: the experts train in forked workers, where a pool of compile
    processes would be one more fork per worker (and the result is the same either way)."""
    from torch._inductor import config as inductor_config

    return inductor_config.patch(compile_threads=1)


def _train_expert(
    expert: str,
    model: Any,
    latents: torch.Tensor,
    masks: torch.Tensor,
    embeds: torch.Tensor,
    caption_index: torch.Tensor,
    empty: int,
    config: dict[str, Any],
    generator: torch.Generator,
    picker: ThreadPicker,
    log: TrainLog,
    progress: bool,
    swaps: torch.Tensor | None = None,
    on_step: Callable[[int, dict[str, torch.Tensor]], None] | None = None,
) -> dict[str, Any]:
    """Rectified flow for one expert on its part of the schedule (``sigma_range``); the EMA weights are kept.

    The loss weighs the latent pixels that encode the ball (``masks``, ``latent_ball_mask``) ``1 + ball_weight``
    times the background's: what the caption decides (the ball's colour, where it goes) is a small part of the
    frame, and an unweighted loss is mostly the background's. Two optional terms aim at the direction word
    (``accel.zoo.mini_wan_objective``; absent keys leave the committed recipe's draws and weights unchanged):
    ``direction_contrast`` (weight, with ``direction_margin`` and ``contrast_rows``, the first rows of the batch
    predicted again under a caption with another direction word from ``swaps``, ``direction_swaps``) and
    ``temporal_weight`` (the frame-to-frame change of the predicted clean latent); ``sigma_power`` leans the
    draws of the expert's time towards the low end of its range (``power_draw``); ``compile`` trains through
    ``torch.compile`` of the expert (``training_forward``). ``on_step``, when given, is
    called after every step with the number of steps done and the EMA weights (the ones the stage keeps; read
    them, do not change them): a learning curve without changing the run.
    """
    cfg = expert_settings(config["train"]["expert"], expert)
    contrast = float(cfg.get("direction_contrast", 0.0))
    temporal = float(cfg.get("temporal_weight", 0.0))
    power = float(cfg.get("sigma_power", 1.0))
    if contrast and swaps is None:
        raise ValueError(
            "direction_contrast needs the captions' direction swaps: pass "
            "swaps=mini_wan_objective.direction_swaps(captions) (or drop direction_contrast from train.expert)"
        )
    shift = config["scheduler"]["shift"]
    low, high = sigma_range(expert, config["boundary_ratio"], shift)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    model.train()
    forward = training_forward(model, bool(cfg.get("compile", False)))
    gaps: list[float] = []  # the contrast's log(wrong / right) error, step by step

    def step_fn(step: int) -> float:
        index = _begin_step(optimizer, step, cfg, latents.shape[0], generator)
        x0 = latents[index]
        which = caption_index[index]
        drop = torch.rand(cfg["batch"], generator=generator) < cfg["empty_caption"]
        which = torch.where(drop, torch.full_like(which, empty), which)
        noise = torch.randn(x0.shape, generator=generator)
        draw = torch.rand(cfg["batch"], generator=generator)
        if power != 1.0:
            draw = power_draw(draw, power)
        sigma = shifted_sigma(low + (high - low) * draw, shift)
        noisy = noised_sample(x0, noise, sigma)
        prediction = forward(
            hidden_states=noisy,
            timestep=sigma * 1000,  # the scheduler's timesteps are its sigmas times num_train_timesteps
            encoder_hidden_states=embeds[which],
            return_dict=False,
        )[0]
        weights = 1.0 + cfg["ball_weight"] * masks[index]
        target = velocity_target(x0, noise)
        squared = (prediction - target) ** 2
        loss: torch.Tensor = (weights * squared).mean() / weights.mean()
        if temporal:
            loss = loss + temporal * temporal_difference_error(predicted_x0(noisy, prediction, sigma), x0, weights)
        if contrast:
            rows = int(cfg.get("contrast_rows", 16))
            wrong = pick_swaps(swaps, which[:rows], generator)  # type: ignore[arg-type]
            keep = wrong >= 0  # dropped captions and captions without a swap in training are left out
            if bool(keep.any()):
                wrong_prediction = forward(
                    hidden_states=noisy[:rows][keep],
                    timestep=sigma[:rows][keep] * 1000,
                    encoder_hidden_states=embeds[wrong[keep]],
                    return_dict=False,
                )[0]
                row_weights = weights[:rows][keep]
                right_error = weighted_row_error(prediction[:rows][keep], target[:rows][keep], row_weights)
                wrong_error = weighted_row_error(wrong_prediction, target[:rows][keep], row_weights)
                margin = float(cfg.get("direction_margin", 0.1))
                loss = loss + contrast * contrast_hinge(right_error, wrong_error, margin)
                gaps.append(float((wrong_error / right_error).detach().log().mean()))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        ema_update(ema, model.state_dict(), ema_decay(step, cfg["ema"]))
        if on_step is not None:
            on_step(step + 1, ema)
        return loss.item()

    graphs = inductor_graphs()
    with _in_process_compile():
        result: dict[str, Any] = _loop(expert, cfg["steps"], step_fn, picker, log, progress, NAME)
    result["inductor_graphs"] = inductor_graphs() - graphs  # 0 when it trained eager
    model.load_state_dict(ema)
    model.eval()
    result["sigma_range"] = [float(shifted_sigma(torch.tensor(v), shift)) for v in (low, high)]
    result["steps"] = cfg["steps"]
    if gaps:  # how far the expert got at telling the directions apart: 0 when it ignores the word
        result["direction_gap"] = sum(gaps[-50:]) / len(gaps[-50:])
    return result


def _expert_job(
    job: tuple[Any, ...], log_path: Path | None
) -> tuple[dict[str, torch.Tensor], dict[str, Any], list[str]]:
    """Train one expert on one thread from its own generator: (its EMA weights, the loop's result, its log lines)."""
    expert, model, latents, masks, embeds, caption_index, empty, config, seed, swaps = job
    torch.set_num_threads(1)
    log = TrainLog(None)
    log.path = log_path  # appended to as it trains (the parent created the file)
    result = _train_expert(
        expert, model, latents, masks, embeds, caption_index, empty, config, torch.Generator().manual_seed(seed),
        ThreadPicker([1]), log, progress=False, swaps=swaps,
    )  # fmt: skip
    return model.state_dict(), result, log.lines


def decoder_parameters(vae: Any) -> list[torch.nn.Parameter]:
    """The VAE's decoding side, what ``_train_decoder`` trains: ``post_quant_conv`` and the decoder."""
    return [*vae.post_quant_conv.parameters(), *vae.decoder.parameters()]


def _train_decoder(
    vae: Any,
    videos: torch.Tensor,
    cfg: dict[str, Any],
    generator: torch.Generator,
    picker: ThreadPicker,
    log: TrainLog,
    progress: bool,
) -> dict[str, Any]:
    """Fine-tune the VAE's decoder alone on whole videos (``train.vae_decoder``); the encoder stays frozen.

    Every latent the experts learn from is the encoder's, so this stage changes none of them and can run beside
    the experts. It is mini-flux's VAE loop (``_train_vae``) with the encoder's parameters frozen: AdamW skips a
    parameter without a gradient, and the KL term, the encoder's alone, is then a constant.
    """
    vae.requires_grad_(False)
    for parameter in decoder_parameters(vae):
        parameter.requires_grad_(True)
    try:
        return _train_vae(vae, videos, cfg, generator, picker, log, progress, NAME, ball_weighting(cfg["ball_weight"]))
    finally:
        vae.requires_grad_(True)


def _decoder_job(
    job: tuple[Any, ...], log_path: Path | None
) -> tuple[dict[str, torch.Tensor], dict[str, Any], list[str]]:
    """``_train_decoder`` on one thread from its own generator: (the VAE's weights, the loop's result, log lines)."""
    vae, videos, cfg, seed = job
    torch.set_num_threads(1)
    log = TrainLog(None)
    log.path = log_path
    result = _train_decoder(vae, videos, cfg, torch.Generator().manual_seed(seed), ThreadPicker([1]), log, False)
    return vae.state_dict(), result, log.lines


_Job = Callable[[tuple[Any, ...], Path | None], tuple[dict[str, torch.Tensor], dict[str, Any], list[str]]]


# The jobs a side-by-side stage runs, set before its workers fork: they inherit them (copy-on-write), so no
# argument crosses a pipe. Pickled, every tensor would go through /dev/shm (torch's reductions): the decoder stage's
# 1.3 GB of videos do not fit a container's default 64 MB.
_FORKED_JOBS: list[tuple[_Job, tuple[Any, ...]]] = []


def _run_forked_job(index: int, log_path: Path | None) -> tuple[dict[str, torch.Tensor], dict[str, Any], list[str]]:
    """The ``index``-th job of ``_FORKED_JOBS``, in a forked worker."""
    run, job = _FORKED_JOBS[index]
    return run(job, log_path)


def _side_by_side(
    jobs: list[tuple[_Job, tuple[Any, ...]]], log_path: Path | None
) -> list[tuple[dict[str, torch.Tensor], dict[str, Any], list[str]]]:
    """Run the jobs (``(function, arguments)``: ``_expert_job`` or ``_decoder_job``), two at a time in forked
    processes where two cores are free, else one after the other; results in the jobs' order.

    No job depends on another's (each draws from its own generator on one thread), so both ways give the same
    weights; side by side halves the stage's time on our 2-core machine, and a third job (the decoder's) takes the
    core the first one to finish leaves. Each process appends its lines to the log as it trains. The workers
    inherit the jobs from the fork (``_FORKED_JOBS``); only their results (the trained weights) are pickled back.
    """
    if usable_cores() < 2 or len(jobs) < 2:
        return [run(job, log_path) for run, job in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    _FORKED_JOBS[:] = jobs
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
            futures = [pool.submit(_run_forked_job, index, log_path) for index in range(len(jobs))]
            return [future.result() for future in futures]
    finally:
        _FORKED_JOBS.clear()


def caption_embeddings(pipe: Any, captions: list[str]) -> tuple[torch.Tensor, list[str], torch.Tensor]:
    """The frozen text encoder's embedding of each distinct caption and of the empty one (classifier-free
    guidance's), computed once: (embeddings, the distinct captions sorted, each training caption's row)."""
    unique = sorted(set(captions) | {""})
    with torch.no_grad():
        embeds = torch.cat(
            [
                pipe.encode_prompt(unique[i : i + 256], do_classifier_free_guidance=False,
                                   max_sequence_length=MAX_SEQUENCE_LENGTH)[0]
                for i in range(0, len(unique), 256)
            ]
        )  # fmt: skip
    position = {caption: i for i, caption in enumerate(unique)}
    return embeds, unique, torch.tensor([position[c] for c in captions])


@torch.no_grad()
def _reconstruction_psnr(vae: Any, count: int = 16) -> float:
    """Mean PSNR (dB) of the VAE's reconstructions of held-out scenes' videos."""
    scenes = [HELD_OUT_SCENES[i % len(HELD_OUT_SCENES)] for i in range(count)]
    videos = torch.from_numpy(np.stack([render_array(s, seed=10_000 + i) for i, s in enumerate(scenes)]))
    reconstruction = vae.decode(vae.encode(videos).latent_dist.mean).sample.clamp(-1, 1)
    mse = ((reconstruction - videos) ** 2).mean(dim=(1, 2, 3, 4))
    return float((10 * torch.log10(4.0 / mse)).mean())


def train(
    out_dir: Path,
    config: dict[str, Any] | None = None,
    threads: int | None = None,
    progress: bool = True,
    log_to: Path | None = None,
) -> dict[str, Any]:
    """Train mini-wan from its seed and write the weights, manifest and log into ``out_dir``.

    Four stages: the text encoder learns to read captions, the VAE to reconstruct the world's videos, then
    each expert rectified flow on the VAE's normalised latents over its part of the schedule, and beside them the
    decoder's fine-tune where the recipe has ``train.vae_decoder``. ``threads``
    fixes the torch thread count; by default it is re-chosen during training (1 or 2, whichever is faster at
    the moment). Returns the manifest.
    """
    from diffusers import WanPipeline

    config = copy.deepcopy(config or MINI_WAN_CONFIG)
    train_cfg = config["train"]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = TrainLog(log_to or out_dir / LOG_FILE)
    picker = ThreadPicker(_thread_candidates(threads))
    started = time.perf_counter()
    seed = train_cfg["seed"]
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)

    log.write(f"{NAME} training: world {WORLD_VERSION}, seed {seed}, {train_cfg['videos']} videos, threads {threads}")
    videos_np, captions = make_dataset(train_cfg["videos"], seed)
    videos = torch.from_numpy(videos_np)
    log.write(f"data: {len(captions)} videos in {time.perf_counter() - started:.0f}s")

    components = build_components(config)
    results = {"text": _train_text_encoder(components, train_cfg["text"], generator, picker, log, progress)}
    vae = per_frame_init(components["vae"])
    # One frame of each video (its index drawn from the seed), then clips of 5 frames: the first half of
    # half the videos and the second half of the others, so the clips see every stretch of the motion.
    pick = torch.randint(0, videos.shape[2], (videos.shape[0],), generator=generator)
    frames = videos[torch.arange(videos.shape[0]), :, pick][:, :, None]
    frames_cfg, clips_cfg = train_cfg["vae_frames"], train_cfg["vae"]
    results["vae_frames"] = _train_vae(
        vae, frames, frames_cfg, generator, picker, log, progress, NAME, ball_weighting(frames_cfg["ball_weight"])
    )
    del frames
    half = videos.shape[0] // 2
    clips = torch.cat([videos[:half, :, :5], videos[half:, :, -5:]])
    results["vae"] = _train_vae(
        vae, clips, clips_cfg, generator, picker, log, progress, NAME, ball_weighting(clips_cfg["ball_weight"])
    )
    del clips
    videos_cfg = train_cfg["vae_videos"]
    results["vae_videos"] = _train_vae(
        vae, videos, videos_cfg, generator, picker, log, progress, NAME, ball_weighting(videos_cfg["ball_weight"])
    )
    torch.set_num_threads(picker.current)
    raw = _encode_latents(components["vae"], videos, batch=32)
    mean = raw.mean(dim=(0, 2, 3, 4))
    std = raw.std(dim=(0, 2, 3, 4))
    latent = {"latents_mean": [round(float(v), 6) for v in mean], "latents_std": [round(float(v), 6) for v in std]}
    components["vae"].register_to_config(**latent)
    log.write(f"vae: latents {raw.shape[1:]} in {raw.nbytes >> 20} MB")
    masks = latent_ball_mask(videos)
    view = (1, -1, 1, 1, 1)
    latents = (raw - torch.tensor(latent["latents_mean"]).view(view)) / torch.tensor(latent["latents_std"]).view(view)

    pipe: Any = WanPipeline(**components)
    embeds, unique, caption_index = caption_embeddings(pipe, captions)
    swaps = direction_swaps(unique)
    jobs: list[tuple[_Job, tuple[Any, ...]]] = [
        (_expert_job, (expert, components[expert], latents, masks, embeds, caption_index, unique.index(""), config,
                    seed + 1 + number, swaps))
        for number, expert in enumerate(EXPERTS)
    ]  # fmt: skip
    stages = list(EXPERTS)
    if "vae_decoder" in train_cfg:  # the decoder's fine-tune, beside the experts (the latents are already taken)
        jobs.append((_decoder_job, (components["vae"], videos, train_cfg["vae_decoder"], seed + 1 + len(EXPERTS))))
        stages.append("vae_decoder")
    for stage, (state, result, lines) in zip(stages, _side_by_side(jobs, log.path), strict=True):
        component = components["vae" if stage == "vae_decoder" else stage]
        component.load_state_dict(state)
        component.eval()
        results[stage] = result
        log.lines += lines
    del videos
    psnr = _reconstruction_psnr(components["vae"])
    log.write(f"vae: held-out reconstruction PSNR {psnr:.2f} dB")
    final_losses = {stage: float(result["final_loss"]) for stage, result in results.items()}
    seconds = {stage: float(result["seconds"]) for stage, result in results.items()}
    seconds["total"] = time.perf_counter() - started

    manifest = {
        "name": NAME,
        "world_version": WORLD_VERSION,
        "config": config,
        "latent": latent,
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "threads": threads if threads else "re-chosen during training (1 or 2; see the log)",
        "final_losses": final_losses,
        "expert_sigma_ranges": {expert: results[expert]["sigma_range"] for expert in EXPERTS},
        "expert_steps": {expert: results[expert]["steps"] for expert in EXPERTS},
        # Graphs inductor compiled (or took from its cache) while each expert trained: 0 when it trained eager.
        "expert_inductor_graphs": {expert: results[expert]["inductor_graphs"] for expert in EXPERTS},
        "text_held_out_accuracy": results["text"]["held_out_accuracy"],
        "vae_reconstruction_psnr_db": psnr,
        "seconds": seconds,
    }
    manifest = write_weights(components, out_dir, COMPONENT_FILES, manifest)
    combined = manifest["sha256"]
    losses = ", ".join(f"{k} {v:.5f}" for k, v in final_losses.items())
    log.write(f"done in {seconds['total']:.0f}s: final losses {losses}; sha256 {combined[:16]}")
    return manifest
