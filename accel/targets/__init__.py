"""Targets: how a pipeline is loaded and driven. ``adapter`` drives any diffusers pipeline as a black box,
``native`` the project's own pipelines; ``registry.py`` holds the ``Target`` protocol and every kind a
profile's ``models[].target`` may name."""
