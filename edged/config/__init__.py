"""The config file, read once into frozen, validated objects: one module per table.

``file`` reads a file (``load_config``) into ``Config``; ``server`` (``[server]``,
``[metrics]``, limits, shared memory, CURVE), ``models`` (``[[models]]`` and their
variants), ``runtimes`` (each runtime's ``[models.variants.options]``), ``preprocess``,
``postprocess`` and ``layouts`` (detectors), ``verify``, ``overload``, ``governor``,
``frigate``, ``kserve`` (and ``[offload]``); ``schema`` is the table reader they share,
``modeljson`` the ``model.json`` beside a model. Nothing here imports a runtime, OpenCV or
anything above it: every other package reads its typed table from here.
"""
