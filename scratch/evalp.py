import sys, copy, random, numpy as np, torch
from accel.zoo.mini_wan import build_mini_wan
from accel.zoo.mini_wan_model import MINI_WAN_CONFIG, build_components
from accel.zoo import video_world as w
from accel.measure.video_adherence import analyse_video, _wrapped
from diffusers import WanPipeline
torch.set_num_threads(1)
comps = build_mini_wan(copy.deepcopy(MINI_WAN_CONFIG))
m = build_components(copy.deepcopy(MINI_WAN_CONFIG))["transformer"]
m.load_state_dict(torch.load(sys.argv[1])); m.eval()
pipe = WanPipeline(**{**comps, "transformer": m, "transformer_2": m}); pipe.set_progress_bar_config(disable=True)
rng = random.Random(5); seen = rng.sample(w.training_scenes(), 16)
for i, s in enumerate(seen):
    out = pipe(s.caption(i % 3), num_frames=9, height=64, width=64, num_inference_steps=20, guidance_scale=float(sys.argv[2]),
               max_sequence_length=16, generator=torch.Generator().manual_seed(i), output_type="np").frames[0]
    a = analyse_video((out * 255).astype(np.float32))
    c = [x for x in a.centroids if x]
    dx = sum(_wrapped(b[0]-p[0]) for p, b in zip(c, c[1:])); dy = sum(_wrapped(b[1]-p[1]) for p, b in zip(c, c[1:]))
    print(s.direction, a.direction, f"dx {dx:+.2f} dy {dy:+.2f}", "found", len(c), s.colour, a.colour)
