"""DistributedDataParallel with one gradient-bucket layout in every attempt: resumed == uninterrupted, bitwise.

Why a plain DDP resume can differ in the last bits: DDP first lays its gradient buckets out in reverse
parameter order, then, after the first backward of each process, rebuilds them in the order the
gradients became ready (``has_rebuilt_buckets`` in ``DDP._get_ddp_logging_data()`` turns 1). The
backend sums a bucket's flat buffer across ranks in an order that depends on where an element sits in
that buffer (gloo's ring reduces each chunk starting at another rank), so moving a parameter in the
layout changes the order its gradient is summed in. An uninterrupted run sums step 0 with the first
layout and every later step with the rebuilt one; a resumed attempt is a new process, so its first step
(say step 12) is summed with the first layout again. Floating-point addition is not associative: the
sum can differ in its last bit, and training carries the difference on.

torch rebuilds only when ``find_unused_parameters`` is off. :func:`ddp` turns it on, so every step of
every attempt uses the first layout, which depends only on the model and the bucket caps. The price is
a walk of the autograd graph per forward (torch says so once per process on stderr: "find_unused_
parameters=True was specified ... but did not find any unused parameters"); what stays free is any model,
any number and size of tensors, any bucket cap. tests/faults/test_ddp_bitwise.py shows both sides.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from roach.errors import UsageError

# Arguments that would let DDP rebuild its buckets (or change them between attempts).
_REFUSED = {
    "find_unused_parameters": "ddp() sets it: DDP rebuilds its buckets after the first step when it is off",
}


def ddp(model: torch.nn.Module, **kwargs: Any) -> DistributedDataParallel:
    """``DistributedDataParallel(model, **kwargs)`` whose bucket layout is the same in every attempt.

    Takes DDP's own arguments (``device_ids``, ``bucket_cap_mb``, ``gradient_as_bucket_view`` ...) but
    not ``find_unused_parameters``, which it sets. Give every attempt the same arguments: the layout
    follows the bucket caps.
    """
    for name, why in _REFUSED.items():
        if name in kwargs:
            raise UsageError(
                f"run.ddp(): {name} is not an argument here ({why}); "
                "call it without, or build DistributedDataParallel yourself"
            )
    return DistributedDataParallel(model, find_unused_parameters=True, **kwargs)
