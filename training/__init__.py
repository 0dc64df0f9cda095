"""The training job: an FSDP2 train function for Ray Train's TorchTrainer, its driver and the NCCL transport gate.

Runs inside the AWS Ray Train container (Python 3.13, torch 2.13, ray 2.58, transformers 5.13) and locally on CPU
(`ray-efa train --local`). Imports only the standard library, torch, ray, transformers, numpy and core/. Nothing is
imported here, so that `import training.local` stays cheap for the CLI.

    driver.py       TorchTrainer + ScalingConfig/RunConfig/FailureConfig, then the transport gate
    train.py        train_func(config): the loop
    model.py        any decoder family's causal LM (transformers' Auto classes) from a core.models preset, with the loss
                    attached (CausalLM); lean_block.py its lean decoder layer where exact
    parallelize.py  activation checkpointing, per-layer torch.compile, FSDP2 fully_shard
    loss.py         output projection + cross-entropy, optionally chunked over tokens
    data.py         random token batches seeded per rank and per step
    metrics.py      progress line, MFU, peak memory, ETA, final table
    checkpoint.py   torch.distributed.checkpoint into Ray Train checkpoints
    local.py        the --local preset
"""
