"""edged: an on-device inference daemon."""

import time as _time

__version__ = "0.1.0"

#: About when this process started (wall clock): ``edged serve`` imports this package
#: first, and the interpreter's start-up before that runs on one thread, so its CPU time
#: is its wall time (less on a loaded machine). Start-up time and uptime count from here
#: (the models' first sessions open while the daemon imports, before the server exists).
#: /proc's start tick is not used: on a VM restored from a snapshot it disagrees with
#: /proc/uptime by seconds.
PROCESS_STARTED_AT = _time.time() - _time.process_time()
