"""The daemon, protocol-neutral, one job per module:

- ``lifecycle``: ``Server`` (start → serve → drain → stop), signals, the long-lived tasks;
  it composes the protocol rooms (``edged.protocols``) and drives each through ``Room``
- ``control``: the control socket and its operator op table
- ``reload``: ``plan_reload`` (pure) and applying a plan
- ``governing``: governor decisions, operator pins and the load's asks → throttles and swaps
- ``overload``: the load's ask (step down while answers come too close to their deadlines)
- ``health``: watchdog, STATUS= line, status and health replies
- ``state``: the small object they share
"""

from edged.server.lifecycle import Server

__all__ = ["Server"]
