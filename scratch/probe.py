import sys, copy, torch
from accel.zoo.mini_wan import build_mini_wan
from accel.zoo.mini_wan_model import MINI_WAN_CONFIG, build_components
from accel.zoo import video_world as w
from accel.measure import mini_wan_eval
from diffusers import WanPipeline
torch.set_num_threads(1)
comps = build_mini_wan(copy.deepcopy(MINI_WAN_CONFIG))
cfg = copy.deepcopy(MINI_WAN_CONFIG)
if len(sys.argv) > 2: cfg["transformer"]["patch_size"] = [1, 1, 1]
m = build_components(cfg)["transformer"]; m.load_state_dict(torch.load(sys.argv[1])); m.eval()
pipe = WanPipeline(**{**comps, "transformer": m, "transformer_2": m})
base = w.VideoScene("blue", "red", "left")
for word, other in (("direction", w.VideoScene("blue", "red", "right")), ("colour", w.VideoScene("blue", "green", "left"))):
    for sigma in (0.95, 0.85, 0.7, 0.5, 0.3):
        r = mini_wan_eval.caption_preference(pipe, base, other, "transformer", sigma)
        print(word, sigma, {k: round(v, 4) for k, v in r.items()})
