"""KServe v2 / Open Inference Protocol: what edged's KServe endpoint and its offload share.

Everything here is free of grpc and aiohttp (the ``kserve`` extra): config, datatypes and
tensor conversion, so ``edged check`` and the suite work without the extra installed.
"""
