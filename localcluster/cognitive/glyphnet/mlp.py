"""The model: a two-layer perceptron (64 -> hidden ReLU -> 10 softmax).

Every matrix product goes through `matmul`, a function the caller chooses: the
CUDA kernel on a GPU, numpy on the CPU. The rest (bias, ReLU, softmax, the
update) is elementwise and stays in numpy.
"""
import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, Sequence, Tuple

import numpy as np

Matmul = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass
class Model:
    w1: np.ndarray                      # (64, hidden)
    b1: np.ndarray                      # (hidden,)
    w2: np.ndarray                      # (hidden, classes)
    b2: np.ndarray                      # (classes,)
    classes: Tuple[str, ...]
    meta: Dict = field(default_factory=dict)

    @property
    def shape(self) -> str:
        return f"{self.w1.shape[0]}-{self.w1.shape[1]}-{self.w2.shape[1]}"


def init(inputs: int, hidden: int, classes: Sequence[str], seed: int) -> Model:
    """He-initialised weights, zero biases."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, np.sqrt(2.0 / inputs), (inputs, hidden)).astype(np.float32)
    w2 = rng.normal(0, np.sqrt(2.0 / hidden), (hidden, len(classes))).astype(np.float32)
    return Model(w1, np.zeros(hidden, np.float32), w2, np.zeros(len(classes), np.float32),
                 tuple(classes))


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def forward(model: Model, x: np.ndarray, matmul: Matmul) -> Tuple[np.ndarray, np.ndarray]:
    """(hidden activations, class probabilities) for a batch x of shape (n, 64)."""
    hidden = np.maximum(matmul(x, model.w1) + model.b1, 0.0)
    return hidden, softmax(matmul(hidden, model.w2) + model.b2)


def predict(model: Model, x: np.ndarray, matmul: Matmul) -> Tuple[np.ndarray, np.ndarray]:
    """(class index, confidence) per row of x."""
    _, probs = forward(model, x, matmul)
    best = probs.argmax(axis=1)
    return best, probs[np.arange(len(best)), best]


def accuracy(model: Model, x: np.ndarray, y: np.ndarray, matmul: Matmul) -> float:
    best, _ = predict(model, x, matmul)
    return float((best == y).mean())


def step(model: Model, velocity: Dict[str, np.ndarray], x: np.ndarray, y: np.ndarray,
         matmul: Matmul, lr: float, momentum: float = 0.9) -> float:
    """One SGD-with-momentum step on a minibatch; returns its cross-entropy loss."""
    n = len(y)
    hidden, probs = forward(model, x, matmul)
    loss = float(-np.log(probs[np.arange(n), y] + 1e-9).mean())
    d_logits = probs
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    grads = {
        "w2": matmul(hidden.T, d_logits),
        "b2": d_logits.sum(axis=0),
    }
    d_hidden = matmul(d_logits, model.w2.T) * (hidden > 0)
    grads["w1"] = matmul(x.T, d_hidden)
    grads["b1"] = d_hidden.sum(axis=0)
    for name, grad in grads.items():
        v = velocity.setdefault(name, np.zeros_like(grad))
        v *= momentum
        v -= lr * grad.astype(np.float32)
        setattr(model, name, (getattr(model, name) + v).astype(np.float32))
    return loss


@dataclass
class EpochReport:
    epoch: int
    loss: float
    train_accuracy: float
    test_accuracy: float
    seconds: float


def train(model: Model, data: Tuple[np.ndarray, np.ndarray], test: Tuple[np.ndarray, np.ndarray],
          matmul: Matmul, epochs: int, batch: int, lr: float, seed: int) -> Iterator[EpochReport]:
    """Train in place, yielding one report per epoch (the caller prints progress)."""
    x, y = data
    rng = np.random.default_rng(seed + 1)
    velocity: Dict[str, np.ndarray] = {}
    for epoch in range(1, epochs + 1):
        start = time.monotonic()
        order = rng.permutation(len(y))
        losses = []
        for i in range(0, len(y), batch):
            idx = order[i:i + batch]
            losses.append(step(model, velocity, x[idx], y[idx], matmul, lr))
        yield EpochReport(epoch, float(np.mean(losses)), accuracy(model, x, y, matmul),
                          accuracy(model, test[0], test[1], matmul), time.monotonic() - start)


def save(model: Model, path: str) -> None:
    """Write the model atomically (temp file, fsync, rename): a reader never sees half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            np.savez(f, w1=model.w1, b1=model.b1, w2=model.w2, b2=model.b2,
                     classes=np.array(model.classes), meta=np.array(json.dumps(model.meta)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(path: str) -> Model:
    with np.load(path, allow_pickle=False) as z:
        return Model(z["w1"], z["b1"], z["w2"], z["b2"],
                     tuple(str(c) for c in z["classes"]), json.loads(str(z["meta"])))
