"""``edged bench``: the load generator (``load``), the in-process references (``raw``),
the floor servers (``floor``) and the command that runs them in interleaved rounds
(``cli``)."""
