"""New model versions while the daemon serves: poll, pull, check, switch, and say so.

Why in the server: this is the one writer of "which version of a delivered model serves".
For every model with a ``[models.source]`` it looks at the source every ``poll_s`` (and on
``edged ctl pull MODEL [VERSION]``), and takes a version through the stages of
docs/delivery.md, each the library's (``edged.delivery``): *downloading* and *verifying*
(signature first, each file against it, into the store), *gating* (the version's model
loaded beside the serving one, its contract against what clients send, its accuracy on its
own validation set on this device), *promoting* (the registry switches to it: requests
taken by the old version finish there, new ones go to the new; none fails), and the store's
serving pointer is written (atomically: a restart serves one whole version). Every stage,
refusal and reason is in ``edged status`` (``delivery``), the log and the metrics
(``edged_model_updates_total{model,outcome,reason}``, ``edged_model_version_info``).

The parts, one idea each: ``deliveries`` (``Deliveries``: which models, what they serve at
start, the poll loop and the operator's pull, promote and rollback, one at a time per
model), ``stages`` (a stored version made a checked candidate: rungs, gate, shadow),
``switch`` (what serves moved, forward at a promotion or back at a rollback), ``watches``
(the window after a promotion, and its resumption after a restart) and ``stored`` (what
they all read of a stored version). Their logger is this package's, ``edged.server.delivery``.
"""
