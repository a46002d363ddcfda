#!/usr/bin/env python3
"""Trains a model with switchyard.train and streams its metrics to TensorBoard through the
on_metrics callback: train loss, learning rate, gradient norm, throughput and the tokens each expert
was routed per logged step; eval loss and per-task accuracy per evaluation.

    python3 examples/python/train_tensorboard.py [--config examples/configs/tiny.json]
        [--logdir runs/tensorboard] [--set train.steps=300 ...]
    tensorboard --logdir runs/tensorboard

The writer is torch.utils.tensorboard's when it imports (it needs the `tensorboard` package), else
tensorboardX's (pip install tensorboardX).
"""
import argparse
import os
import sys


def summary_writer(logdir):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            sys.exit("neither torch.utils.tensorboard (pip install tensorboard) nor tensorboardX "
                     "(pip install tensorboardX) is installed")
    return SummaryWriter(logdir)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=os.path.join(here, "..", "configs", "tiny.json"))
    parser.add_argument("--logdir", default="runs/tensorboard")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override, as switchyard train --set")
    args = parser.parse_args()

    import switchyard

    overrides = dict(kv.split("=", 1) for kv in args.set)
    writer = summary_writer(args.logdir)

    def on_metrics(record):
        step = record["step"]
        if "eval_loss" in record:
            writer.add_scalar("eval/loss", record["eval_loss"], step)
            for task, scores in record.get("eval_tasks", {}).items():
                writer.add_scalar(f"eval/exact_match/{task}", scores["exact_match"], step)
        else:
            for key in ("loss", "ce_loss", "aux_loss", "lr", "grad_norm", "tokens_per_s"):
                writer.add_scalar(f"train/{key}", record[key], step)
            for layer, counts in enumerate(record.get("expert_load", [])):
                for expert, tokens in enumerate(counts):
                    writer.add_scalar(f"expert_load/layer{layer}/expert{expert}", tokens, step)
        writer.flush()

    final = switchyard.train(args.config, overrides=overrides, on_metrics=on_metrics)
    writer.close()
    if final is not None:
        print(f"final eval loss {final['eval_loss']:.4f}; TensorBoard: tensorboard --logdir "
              f"{args.logdir}")


if __name__ == "__main__":
    main()
