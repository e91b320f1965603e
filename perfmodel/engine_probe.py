"""The element-wise RDM engine operations a machine profile times (profile ``[engine_ops]``),
and what each one does in ``shardgnn.rdm.engine.TensorOps``. Pure.

The timers that run them with the engine's own code live beside the engine, in
``shardgnn.rdm.probe``; ``shardgnn-perfmodel calibrate`` imports that module when it runs.
"""
from __future__ import annotations

#: Element-wise engine operations timed by ``shardgnn.rdm.probe.op_timers``.
ENGINE_OPS = {
    "h0_dropout": "get('H0'): the keyed dropout of the feature tile (mask and multiply, one new tensor)",
    "bias": "add_bias: Z += b in place",
    "act": "activate: relu, then the keyed dropout (mask and multiply; two new tensors)",
    "loss": "loss_grad: log-softmax cross-entropy and its gradient over the logits tile",
    "mask_grad": "mask_grad: dZ = where(H > 0, dH / (1 - p), 0)",
    "bgrad": "bgrad: column sums of dZ into the bias gradient",
    "mask_pack": "redistribute_mask: (H > 0) as uint8 before the Alltoallv",
}
