"""The daemon, in rooms (one job per module):

- ``lifecycle``: ``Server`` (start → serve → drain → stop), signals, the long-lived tasks
- ``endpoints``: binding sockets, CURVE, ipc permissions, envelopes
- ``inference``: receive, admission, decode offload, replies, request metrics
- ``control``: the operator op table
- ``reload``: ``plan_reload`` (pure) and applying a plan
- ``governing``: governor decisions and operator pins → model throttles and swaps
- ``health``: watchdog, STATUS= line, status and health replies
- ``state``: the small object they share
"""

from edged.server.lifecycle import Server
from edged.server.state import StartupError

__all__ = ["Server", "StartupError"]
