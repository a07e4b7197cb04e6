"""mini-wan's optional direction terms (``accel.zoo.mini_wan_objective``): the caption swaps, the contrast hinge,
the temporal-difference error, and that the expert stage uses them when asked and never otherwise."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from accel.zoo import mini_wan, mini_wan_objective, mini_wan_train, video_world
from accel.zoo.mini_flux_loop import ThreadPicker, TrainLog
from accel.zoo.mini_flux_objective import noised_sample, velocity_target


def test_direction_swaps_change_only_the_direction_word_and_never_name_a_held_out_caption():
    training = video_world.training_scenes()
    captions = sorted({scene.caption(t) for scene in training for t in range(len(video_world.TEMPLATES))} | {""})
    table = mini_wan_objective.direction_swaps(captions)
    held_out = {scene.caption(t) for scene in video_world.HELD_OUT_SCENES for t in range(len(video_world.TEMPLATES))}
    assert (table[captions.index("")] == -1).all()
    rows_with_a_gap = 0
    for row, caption in enumerate(captions):
        if not caption:
            continue
        swaps = [captions[i] for i in table[row].tolist() if i >= 0]
        rows_with_a_gap += len(swaps) < len(video_world.DIRECTIONS) - 1
        for swap in swaps:
            changed = [(a, b) for a, b in zip(caption.split(), swap.split(), strict=True) if a != b]
            assert len(changed) == 1 and {a.strip(",") for a in changed[0]} <= set(video_world.DIRECTIONS), swap
            assert swap not in held_out
    assert rows_with_a_gap  # some swaps would name a held-out combination: they are left out, not kept


def test_picked_swaps_come_from_the_row_and_minus_one_where_the_row_has_none():
    table = torch.tensor([[3, 5, -1], [-1, -1, -1], [0, 1, 2]])
    which = torch.tensor([0, 1, 2] * 50)
    picked = mini_wan_objective.pick_swaps(table, which, torch.Generator().manual_seed(0))
    assert set(picked[which == 0].tolist()) == {3, 5}
    assert set(picked[which == 1].tolist()) == {-1}
    assert set(picked[which == 2].tolist()) == {0, 1, 2}


def test_the_contrast_hinge_is_zero_past_the_margin_and_pushes_the_wrong_error_up_below_it():
    margin = 0.25
    right = torch.tensor([1.0, 2.0])
    past = right * (1 + margin) * 1.01
    assert float(mini_wan_objective.contrast_hinge(right, past, margin)) == 0.0
    wrong = torch.tensor([1.0, 2.2], requires_grad=True)
    loss = mini_wan_objective.contrast_hinge(right, wrong, margin)
    expected = (math.log1p(margin) + (math.log1p(margin) - math.log(1.1))) / 2
    assert float(loss.detach()) == pytest.approx(expected)
    loss.backward()
    assert wrong.grad is not None and (wrong.grad < 0).all()  # descending the loss raises the wrong error
    with pytest.raises(ValueError, match="positive margin"):
        mini_wan_objective.contrast_hinge(right, past, 0.0)


def test_the_temporal_error_ignores_a_static_error_and_weighs_a_change_by_its_frames():
    x0 = torch.randn(2, 3, 4, 5, 5, generator=torch.Generator().manual_seed(0))
    weights = torch.ones(2, 1, 4, 5, 5)
    static = x0 + torch.randn(2, 3, 1, 5, 5)  # the same error on every frame: no change of motion
    assert float(mini_wan_objective.temporal_difference_error(static, x0, weights)) == pytest.approx(0.0, abs=1e-10)
    moved = x0.clone()
    moved[:, :, 2:] += 1.0  # one step between frames 1 and 2: one of three changes is off by 1
    assert float(mini_wan_objective.temporal_difference_error(moved, x0, weights)) == pytest.approx(1 / 3)
    weights[:, :, 2] = 5.0  # the changed pair (1, 2) and the pair (2, 3) now weigh 5
    assert float(mini_wan_objective.temporal_difference_error(moved, x0, weights)) == pytest.approx(5 / 11)


def test_the_predicted_clean_latent_of_the_true_velocity_is_the_clean_latent():
    generator = torch.Generator().manual_seed(1)
    x0, noise = torch.randn(3, 2, 3, 4, 4, generator=generator), torch.randn(3, 2, 3, 4, 4, generator=generator)
    sigma = torch.tensor([0.2, 0.8, 1.0])
    implied = mini_wan_objective.predicted_x0(noised_sample(x0, noise, sigma), velocity_target(x0, noise), sigma)
    assert torch.allclose(implied, x0, atol=1e-6)


def _tiny_expert_run(expert_cfg: dict, on_step=None) -> dict[str, torch.Tensor]:
    """Three steps of ``_train_expert`` on a tiny transformer and data: the resulting weights."""
    config = copy.deepcopy(mini_wan.MINI_WAN_CONFIG)
    config["transformer"].update(num_layers=1)
    config["train"]["expert"].update(steps=3, warmup=1, batch=8, steps_by_expert={})
    config["train"]["expert"].update(expert_cfg)
    model = mini_wan_train.build_components(config)["transformer"]
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(8, 8, 3, 4, 4, generator=generator)
    masks = (torch.rand(8, 1, 3, 4, 4, generator=generator) > 0.7).float()
    scenes = video_world.training_scenes()[:8]
    captions = sorted({s.caption(0) for s in video_world.training_scenes()} | {""})
    embeds = torch.randn(len(captions), mini_wan.MAX_SEQUENCE_LENGTH, 64, generator=generator)
    caption_index = torch.tensor([captions.index(s.caption(0)) for s in scenes])
    mini_wan_train._train_expert(
        "transformer", model, latents, masks, embeds, caption_index, captions.index(""), config,
        torch.Generator().manual_seed(1), ThreadPicker([1]), TrainLog(None), progress=False,
        swaps=mini_wan_objective.direction_swaps(captions), on_step=on_step,
    )  # fmt: skip
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_the_expert_stage_contrasts_each_row_with_another_direction_s_caption_when_asked(monkeypatch):
    calls = []
    real = mini_wan_train.contrast_hinge

    def spy(right: torch.Tensor, wrong: torch.Tensor, margin: float) -> torch.Tensor:
        calls.append((right.detach(), wrong.detach(), margin))
        return real(right, wrong, margin)

    monkeypatch.setattr(mini_wan_train, "contrast_hinge", spy)
    contrasted = _tiny_expert_run({"direction_contrast": 1.0, "direction_margin": 0.2, "contrast_rows": 4})
    assert len(calls) == 3 and all(margin == 0.2 for *_, margin in calls)
    # The wrong caption's prediction differs from the right one's row by row (the same caption would tie).
    assert all(len(right) >= 1 and (right != wrong).all() for right, wrong, _ in calls)
    plain = _tiny_expert_run({})
    assert any(not torch.equal(contrasted[k], plain[k]) for k in plain)


def test_the_temporal_term_changes_the_expert_only_when_asked(monkeypatch):
    plain = _tiny_expert_run({})
    temporal = _tiny_expert_run({"temporal_weight": 1.0})
    assert any(not torch.equal(temporal[k], plain[k]) for k in plain)

    def never(*args: object) -> torch.Tensor:
        raise AssertionError("the committed recipe (no direction keys) must not call the direction terms")

    for name in ("contrast_hinge", "temporal_difference_error", "pick_swaps"):
        monkeypatch.setattr(mini_wan_train, name, never)
    again = _tiny_expert_run({})
    assert all(torch.equal(again[k], plain[k]) for k in plain)  # and the same draws: the same weights


def test_the_contrast_without_swaps_is_refused():
    config = copy.deepcopy(mini_wan.MINI_WAN_CONFIG)
    config["train"]["expert"].update(direction_contrast=1.0)
    with pytest.raises(ValueError, match="direction_swaps"):
        mini_wan_train._train_expert(
            "transformer", None, None, None, None, None, 0, config, torch.Generator(), ThreadPicker([1]),
            TrainLog(None), progress=False,
        )  # fmt: skip


def test_the_power_draw_leans_towards_zero_by_its_power_and_refuses_a_non_positive_one():
    draw = torch.rand(20_000, generator=torch.Generator().manual_seed(2))
    for power in (2.0, 3.0):
        leaned = mini_wan_objective.power_draw(draw, power)
        assert ((leaned >= 0) & (leaned <= 1)).all()
        for q in (0.1, 0.25, 0.5):  # P(r ** power < q) = q ** (1 / power)
            assert float((leaned < q).float().mean()) == pytest.approx(q ** (1 / power), abs=0.015)
    with pytest.raises(ValueError, match="positive power"):
        mini_wan_objective.power_draw(draw, 0.0)


def test_the_sigma_power_lowers_every_draw_of_the_expert_s_sigma_and_its_absence_changes_nothing(monkeypatch):
    seen: list[torch.Tensor] = []
    real = mini_wan_train.noised_sample

    def spy(x0: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        seen.append(sigma.clone())
        return real(x0, noise, sigma)

    monkeypatch.setattr(mini_wan_train, "noised_sample", spy)
    runs = {}
    for name, cfg in (("absent", {}), ("one", {"sigma_power": 1.0}), ("three", {"sigma_power": 3.0})):
        seen.clear()
        weights = _tiny_expert_run(cfg)
        runs[name] = (torch.cat(seen), weights)
    plain, leaned = runs["absent"][0], runs["three"][0]
    assert torch.equal(runs["one"][0], plain)  # no key is the uniform draw, the committed recipe's
    assert all(torch.equal(runs["one"][1][k], runs["absent"][1][k]) for k in runs["absent"][1])
    shift, boundary = mini_wan.MINI_WAN_CONFIG["scheduler"]["shift"], mini_wan.MINI_WAN_CONFIG["boundary_ratio"]
    low_u = mini_wan_train.sigma_range("transformer", boundary, shift)[0]
    low = mini_wan_train.shifted_sigma(torch.tensor(low_u), shift)
    assert (leaned <= plain).all() and (leaned < plain).any()  # the same uniform draws, each one lowered
    assert (leaned >= low - 1e-6).all()  # and still within the expert's range
    assert any(not torch.equal(runs["three"][1][k], plain_w) for k, plain_w in runs["absent"][1].items())


def test_the_step_callback_sees_each_step_s_ema_weights_and_the_last_are_the_ones_kept():
    seen: list[tuple[int, dict[str, torch.Tensor]]] = []
    kept = _tiny_expert_run({}, on_step=lambda step, ema: seen.append((step, {k: v.clone() for k, v in ema.items()})))
    assert [step for step, _ in seen] == [1, 2, 3]
    assert all(torch.equal(seen[-1][1][k], kept[k]) for k in kept)  # the EMA after the last step is what is kept
    assert any(not torch.equal(seen[0][1][k], kept[k]) for k in kept)  # and the first step's is not yet that
    assert all(torch.equal(_tiny_expert_run({})[k], kept[k]) for k in kept)  # watching changes nothing


def test_an_expert_named_in_steps_by_expert_trains_its_own_steps_with_the_learning_rate_over_them():
    plain = _tiny_expert_run({})  # steps 3
    # The recipe's steps (5) are the other expert's; this one runs 3 with its cosine over 3, as if steps were 3.
    own = _tiny_expert_run({"steps": 5, "steps_by_expert": {"transformer": 3}})
    assert all(torch.equal(own[k], plain[k]) for k in plain)
    other = _tiny_expert_run({"steps_by_expert": {"transformer_2": 5}})  # names only the other expert
    assert all(torch.equal(other[k], plain[k]) for k in plain)
    longer = _tiny_expert_run({"steps_by_expert": {"transformer": 4}})
    assert any(not torch.equal(longer[k], plain[k]) for k in plain)
    assert mini_wan_train.expert_steps(mini_wan.MINI_WAN_CONFIG["train"]["expert"], "transformer_2") == 18000
    with pytest.raises(ValueError, match=r"steps_by_expert: \['transformer_3'\] are not experts"):
        mini_wan_train.expert_steps({"steps": 3, "steps_by_expert": {"transformer_3": 4}}, "transformer")


def test_any_per_expert_setting_reaches_the_expert_it_names_and_only_that_one():
    # The recipe leans the low-noise expert's draws to the top of its range (sigma_power_by_expert, wave 14).
    leaned = _tiny_expert_run({"sigma_power": 3.0})
    plain = _tiny_expert_run({})
    own = _tiny_expert_run({"sigma_power_by_expert": {"transformer": 3.0}})
    assert all(torch.equal(own[k], leaned[k]) for k in leaned)
    other = _tiny_expert_run({"sigma_power_by_expert": {"transformer_2": 3.0}})  # names only the other expert
    assert all(torch.equal(other[k], plain[k]) for k in plain)
    recipe = mini_wan.MINI_WAN_CONFIG["train"]["expert"]
    low, high = (mini_wan_train.expert_settings(recipe, e) for e in ("transformer_2", "transformer"))
    assert low["sigma_power"] == 0.5 and "sigma_power" not in high
    assert not any(key.endswith("_by_expert") for key in (*low, *high))
    with pytest.raises(ValueError, match=r"batch_by_expert: 'batch' cannot differ by expert \(expected one of "):
        mini_wan_train.expert_settings({"steps": 3, "batch_by_expert": {"transformer": 4}}, "transformer")
    with pytest.raises(ValueError, match=r"steps_by_expert: expected a mapping of expert to value, got 4"):
        mini_wan_train.expert_settings({"steps": 3, "steps_by_expert": 4}, "transformer")
    with pytest.raises(ValueError, match=r"lr_by_expert: \['expert_3'\] are not experts"):
        mini_wan_train.expert_settings({"steps": 3, "lr_by_expert": {"expert_3": 1.0}}, "transformer")
