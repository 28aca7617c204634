"""TensorRT: ``backend`` serves a ``.engine`` plan on an NVIDIA GPU; ``plan`` says whether a
plan is loadable here (from its sidecar, before any GPU call), ``keys`` what a plan is tied
to, ``buffers`` its device and pinned host memory, ``cuda`` the CUDA and TensorRT helpers it
shares with ``edged compile``. Nothing here imports TensorRT or CUDA until a plan is opened.
"""
