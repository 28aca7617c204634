"""Pipelines: a detector, then stages classifying the crops of its boxes (docs/pipelines.md).

``pipeline`` (the served pipeline), ``run`` (one frame's run and its boxes' states),
``crops`` (which boxes, and the crops), ``reuse`` (a track's result carried across frames),
``plan`` (the order in which the governor and the load step the members down).
"""
