"""Targets: how a pipeline is loaded and driven. ``adapter`` drives any diffusers pipeline as a black box."""
