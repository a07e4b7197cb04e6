"""Stand-in for ``vllm_omni.inputs.data``."""


class OmniDiffusionSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)
