"""Thermal and power governor: sensors (sysfs, psutil, NVML) and a level policy.

The daemon drives it (``edged/server/governing.py``): ``Sensors.sample()``
(``sensors/sampler.py``) in a worker thread every ``interval_s``, ``Governor.step()``
(``policy.py``, pure) on the result, and applies the returned ``Decision``
(``decision.py``: variant ladder steps, batch cap, rate cap, shedding) when
``decision.changed``; it may report each model's active variant and duty with
``observe_load`` for the predicted variant choice. Recorded traces replay through
``edged governor replay`` (``replay.py``); ``python -m edged.governor`` samples a board
(``__main__.py``). See docs/governor.md.

Why this package re-exports nothing: every user (the server, the CLI, tests) imports a
name from the module that defines it, so there is one place to look for each name, and
the config's types stay in ``edged.config.governor`` where the config is read.
"""
