"""What this device can run, checked on the device itself.

``edged device-check`` (``check``): platform facts, which runtimes import, whether a CUDA
device and NVML are usable, then every backend and precision served through the daemon
and compared with ONNX Runtime fp32 on CPU (``probe``, ``candidates``, ``serve``,
``table``, ``report``). ``edged isa-check`` (``isa_check``, ``qemu``): ``edged check
--verify`` and the in-process model tests under an emulated x86-64 CPU without AVX-512.
``scripts/ops/device-check`` and ``scripts/ops/isa-check`` are the same commands.
"""
