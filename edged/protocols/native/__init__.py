"""Wire protocol v1: multipart ZeroMQ messages with a JSON header and raw tensor frames.

One module per concern, so a client imports only what it decodes and the daemon only
what it parses and writes (docs/protocol.md):

- ``tensors``: the dtype allow-list and the zero-copy view of a received frame;
- ``request``: parsing and bounding a request off the socket (``parse_request``);
- ``reply``: the daemon's replies (``ok_reply_frames``, ``error_reply``);
- ``client_decode``: a client reading a reply back into arrays (``decode_reply``);
- ``detections``: a detection model's ``[K, 6]`` frame, written and read;
- ``control``: the operator ops of the control endpoint (``CONTROL_OPS``).

The bounds a request is checked against are ``edged.config.server.Limits`` (``[server.limits]``).
"""

#: the protocol version every header carries as ``"v"``
VERSION = 1
