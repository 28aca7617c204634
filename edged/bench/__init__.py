"""``edged bench``: the load generator (``load``), the in-process references (``raw``),
the floor servers (``floor``), the command that runs them in interleaved rounds
(``cli``) and ``edged bench soak`` (``soak``; its mix, capacity probe and report in
``soak_mix``, ``soak_probe`` and ``soak_report``)."""
