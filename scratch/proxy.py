"""Proxy: can one Wan expert learn direction on the torus world? (committed VAE/text; fresh expert, full range)"""
import sys, time, copy, json
import numpy as np, torch
from accel.zoo.mini_wan import build_mini_wan, read_manifest
from accel.zoo.mini_wan_model import MINI_WAN_CONFIG, build_components, MAX_SEQUENCE_LENGTH
from accel.zoo.mini_wan_train import make_dataset, shifted_sigma
from accel.zoo.mini_flux_train import _encode_latents
from accel.zoo.mini_flux_objective import noised_sample, velocity_target, ema_update, ema_decay
from accel.zoo import video_world as w
from accel.measure.video_adherence import score_video

steps = int(sys.argv[1]); lam = float(sys.argv[2]); tag = sys.argv[3]
overrides = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
torch.set_num_threads(1)
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
t0 = time.time()
comps = build_mini_wan(copy.deepcopy(MINI_WAN_CONFIG))
cfg = copy.deepcopy(MINI_WAN_CONFIG); cfg["transformer"].update(overrides)
fresh = build_components(cfg)["transformer"]
vids_np, caps = make_dataset(3000, 0)
vids = torch.from_numpy(vids_np)
vae = comps["vae"]
raw = _encode_latents(vae, vids, batch=32)
mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1); std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
lat = (raw - mean) / std
# ball mask on the latent grid
bg = vids.flatten(3).median(dim=3).values  # N C F
dist = ((vids - bg[..., None, None]) ** 2).sum(1).sqrt()  # N F H W
m = (dist > 0.3).float()
first = m[:, :1]
rest = m[:, 1:].unflatten(1, (-1, 4)).amax(2)
mf = torch.cat([first, rest], 1)  # N 3 64 64
mask = torch.nn.functional.max_pool2d(mf, 8)[:, None]  # N 1 3 8 8
print("data+latents", time.time() - t0, "mask frac", mask.mean().item(), flush=True)
from diffusers import WanPipeline
pipe = WanPipeline(**comps)
uniq = sorted(set(caps) | {""})
with torch.no_grad():
    emb = torch.cat([pipe.encode_prompt(uniq[i:i+256], do_classifier_free_guidance=False, max_sequence_length=16)[0] for i in range(0, len(uniq), 256)])
pos = {c: i for i, c in enumerate(uniq)}
ci = torch.tensor([pos[c] for c in caps]); empty = pos[""]
model = fresh; model.train()
ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
B = 64
for step in range(steps):
    lr = 1e-3 * min(1, (step + 1) / 100) * (0.5 * (1 + np.cos(np.pi * step / steps)))
    for pg in opt.param_groups: pg["lr"] = lr
    idx = torch.randint(0, lat.shape[0], (B,), generator=g)
    x0 = lat[idx]; which = ci[idx]
    drop = torch.rand(B, generator=g) < 0.1
    which = torch.where(drop, torch.full_like(which, empty), which)
    noise = torch.randn(x0.shape, generator=g)
    sigma = shifted_sigma(torch.rand(B, generator=g), 5.0)
    pred = model(hidden_states=noised_sample(x0, noise, sigma), timestep=sigma * 1000, encoder_hidden_states=emb[which], return_dict=False)[0]
    wgt = 1 + lam * mask[idx]
    loss = (wgt * (pred - velocity_target(x0, noise)) ** 2).mean() / wgt.mean()
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    ema_update(ema, model.state_dict(), ema_decay(step, 0.995))
    if step % 250 == 0 or step == steps - 1:
        print(step, round(loss.item(), 4), round(time.time() - t0), flush=True)
model.load_state_dict(ema); model.eval()
pipe = WanPipeline(**{**comps, "transformer": model, "transformer_2": model})
pipe.set_progress_bar_config(disable=True)
import random
rng = random.Random(5)
seen = rng.sample(w.training_scenes(), 16)
for name, scenes in (("seen", seen), ("held", list(w.HELD_OUT_SCENES[:16]))):
    tot = {}
    for i, s in enumerate(scenes):
        out = pipe(s.caption(i % 3), num_frames=9, height=64, width=64, num_inference_steps=20, guidance_scale=5.0,
                   max_sequence_length=16, generator=torch.Generator().manual_seed(i), output_type="np").frames[0]
        r = score_video(s, (out * 255).astype(np.float32))
        for k, v in r.items(): tot[k] = tot.get(k, 0) + v / len(scenes)
    print(tag, name, {k: round(v, 2) for k, v in tot.items()}, flush=True)
print("total", time.time() - t0)
torch.save(model.state_dict(), f"/tmp/proxy-{tag}.pt")
