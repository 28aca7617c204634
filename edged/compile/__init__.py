"""``edged compile``: turn one trained ONNX model into a checked, timed ladder of variants.

``run`` is the library (one compile run), ``options`` its typed inputs, ``steps`` the table
of build steps (``*_steps``, one runtime each), ``checks`` validates and times each artifact,
``ladder`` orders them, ``served_config`` writes the config that serves them, ``cli`` the command.
"""
