"""python3 -m glyphnet {train,serve,probe}: see --help."""
import argparse
import sys
from typing import List, Optional

from .backend import DEVICES, NoGpu
from volumes.cuda_driver import CudaUnavailable


def _training_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--samples", type=_positive, default=12000,
                   help="training glyphs to generate (test set: a quarter as many) [%(default)s]")
    p.add_argument("--epochs", type=_positive, default=20, help="passes over the data [%(default)s]")
    p.add_argument("--hidden", type=_positive, default=64, help="hidden units [%(default)s]")
    p.add_argument("--batch", type=_positive, default=64, help="minibatch size [%(default)s]")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate [%(default)s]")
    p.add_argument("--noise", type=float, default=0.35,
                   help="std-dev of the Gaussian pixel noise [%(default)s]")
    p.add_argument("--seed", type=int, default=0, help="random seed (data and weights) [%(default)s]")


def _device_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto: the GPU if usable, else numpy on the CPU (said in the log); "
                        "gpu: fail without one; cpu: never try [%(default)s]")
    p.add_argument("--libcuda", metavar="PATH",
                   help="CUDA driver library to load (also $GLYPHNET_LIBCUDA) [default: the driver "
                        "volume's /usr/local/nvidia/lib64/libcuda.so.1, then libcuda.so.1]")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from .serve import __doc__ as serve_doc
    parser = argparse.ArgumentParser(
        prog="python3 -m glyphnet",
        description="A small glyph classifier (8x8 digits drawn in code, an MLP trained with "
                    "numpy) whose matrix products run on the GPU through the CUDA driver API "
                    "when one is usable, else on the CPU.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    t = sub.add_parser("train", help="the batch job: train, save the model, report accuracy",
                       description="Generate the data, train the MLP, save it (atomically).")
    _training_flags(t)
    _device_flags(t)
    t.add_argument("--out", metavar="PATH",
                   help="where to save the model [$MESOS_SANDBOX/glyphnet.npz, else ./glyphnet.npz]")
    t.add_argument("--min-accuracy", type=float, default=0.8,
                   help="exit 1 if the test accuracy ends below this [%(default)s]")

    s = sub.add_parser("serve", help="the inference service: GET /health, POST /predict",
                       description=serve_doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--model", metavar="PATH", help="a model saved by `train` [train one at start]")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; 0.0.0.0 exposes it beyond this host [%(default)s]")
    s.add_argument("--port", type=int, default=None,
                   help="port to listen on [$PORT0, else $PORT, else any free port]")
    s.add_argument("--duration", type=float, default=0.0,
                   help="seconds to serve, then exit 0; 0 serves until SIGTERM [%(default)s]")
    _training_flags(s)
    _device_flags(s)

    p = sub.add_parser("probe", help="say which compute would be used, and why",
                       description="Open the GPU (or fall back) and multiply two matrices.")
    _device_flags(p)
    return parser


def probe(args: argparse.Namespace) -> int:
    import numpy as np
    from .backend import select
    backend = select(args.device, args.libcuda, lambda line: print(f"glyphnet probe: {line}"))
    try:
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        ok = np.allclose(backend.matmul(a, a.T), a @ a.T)
        print(f"glyphnet probe: 3x4 @ 4x3 on {backend.kind}: {'matches' if ok else 'DIFFERS FROM'} numpy")
        return 0 if ok else 1
    finally:
        backend.close()


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from . import serve, train
    func = {"train": train.run, "serve": serve.run, "probe": probe}[args.command]
    try:
        return func(args)
    except (NoGpu, CudaUnavailable, ValueError, OSError) as e:     # CudaError: a GPU call failed mid-run
        print(f"glyphnet {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
