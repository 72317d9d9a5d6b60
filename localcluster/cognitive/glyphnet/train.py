"""The batch training job: make the glyph data, train the MLP, save it, report.

Exit status 0 when the held-out accuracy reaches --min-accuracy, 1 when it does
not (a training run that learnt nothing should fail its task, not pass it).
"""
import argparse
import dataclasses
import os
import time
from typing import Callable, Optional

from . import glyphs, mlp
from .backend import Backend, select
from .rendezvous import Rendezvous


def default_model_path() -> str:
    """The task's sandbox (Mesos sets MESOS_SANDBOX in both containerizers), else here."""
    return os.path.join(os.environ.get("MESOS_SANDBOX", "."), "glyphnet.npz")


def fit(args: argparse.Namespace, backend: Backend, say: Callable[[str], None],
        ranks: Optional[Rendezvous] = None) -> mlp.Model:
    """Train a fresh model as the arguments say, printing one line per epoch. With
    `ranks` (a gang's rendezvous) each rank trains on its own data and the weights are
    averaged over the ranks after every epoch."""
    share = ranks.rank if ranks is not None else 0
    x, y = glyphs.make_dataset(args.samples, seed=args.seed + 7919 * share, noise=args.noise)
    test = glyphs.make_dataset(max(args.samples // 4, 100), seed=args.seed + 1000, noise=args.noise)
    model = mlp.init(glyphs.PIXELS, args.hidden, glyphs.CLASSES, seed=args.seed)
    say(f"data: {len(y)} training and {len(test[1])} test glyphs, {len(glyphs.CLASSES)} classes, "
        f"{glyphs.SIZE}x{glyphs.SIZE}, noise {args.noise}; model MLP {model.shape}")
    start = time.monotonic()
    report = None
    for report in mlp.train(model, (x, y), test, backend.matmul, epochs=args.epochs,
                            batch=args.batch, lr=args.lr, seed=args.seed + share):
        if ranks is not None:
            model.w1, model.b1, model.w2, model.b2 = ranks.average(
                [model.w1, model.b1, model.w2, model.b2])
            report = dataclasses.replace(
                report, test_accuracy=mlp.accuracy(model, *test, backend.matmul))
        say(f"epoch {report.epoch:3d}/{args.epochs}  loss {report.loss:.4f}  "
            f"train acc {report.train_accuracy:.3f}  test acc {report.test_accuracy:.3f}  "
            f"({report.seconds:.2f} s)")
    model.meta = {
        "epochs": args.epochs, "samples": args.samples, "seed": args.seed, "noise": args.noise,
        "test_accuracy": report.test_accuracy if report else None,
        "compute": backend.kind, "seconds": round(time.monotonic() - start, 3),
    }
    return model


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(f"glyphnet train: {line}", flush=True)

    backend = select(args.device, args.libcuda, say)
    ranks = Rendezvous.from_env()
    try:
        if ranks is not None:
            ranks.meet()
            say(f"rendezvous: rank {ranks.rank} of {ranks.world} met at "
                f"{ranks.address}:{ranks.port}; weights averaged over the ranks every epoch")
        model = fit(args, backend, say, ranks)
    finally:
        backend.close()
        if ranks is not None:
            ranks.close()
    out = args.out or default_model_path()
    mlp.save(model, out)
    acc = model.meta["test_accuracy"] or 0.0
    say(f"saved model to {out} (test accuracy {acc:.3f} on {backend.kind}, "
        f"{model.meta['seconds']:.1f} s)")
    if acc < args.min_accuracy:
        say(f"FAILED: test accuracy {acc:.3f} is below --min-accuracy {args.min_accuracy}")
        return 1
    return 0
