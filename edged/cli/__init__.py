"""The ``edged`` command (``main``), one module per command group."""
