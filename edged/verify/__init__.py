"""Verification before a variant goes live: checked on this device, against the reference.

Why not against recorded numbers: ONNX Runtime's int8 kernels round differently on
AVX2, AVX-512 VNNI and ARM, so a variant's raw outputs on the machine that built it
are not what it computes here (an SSD's box rows shift by one when one box more passes).
What a swap must keep is the *task*: the same top-1 class, the same boxes. So a
candidate runs a set of check inputs and is compared with the model's reference variant
run on the same inputs *on this device*, at the level of the task, with tolerances per
precision (``config``), on inputs from the golden file, the model's validation data or
the requests it served (``inputs``), by the measures of ``compare``; ``verifier`` holds
a model's reference outputs and answers "may this variant go live".
"""
